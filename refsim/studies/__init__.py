"""What-if studies over decode events: trace replays, budget sweeps, widening."""
