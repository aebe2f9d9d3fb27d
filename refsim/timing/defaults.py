"""The device what-ifs' default assumptions, in a module of their own so that a command's parser
(refsim.cli.device) names them without importing the model code (start-up, issue 17).
:mod:`refsim.timing.breakeven` and :mod:`refsim.timing.whatif` re-export them."""

DEFAULT_EPS = 0.38
"""Compute cost of each extra verify position as a fraction of one position's, from bmoe-engine.md
§7 (host MTP, draft 3: target compute per token 0.115 -> 0.088 s at 2.78 tokens per verify decode,
so a 4-position decode costs 0.245 s = 2.13 x 0.115: (2.13 - 1) / 3 = 0.38). Were the MTP head's
0.020-0.023 s/token inside that compute figure it would be 0.20: docs/timing.md."""

EPS_RANGE = (0.2, 0.4)
"""The honest range of the position cost (docs/timing.md, "What the shared runs identify"): 0.20
with the MTP head's time inside the host's compute figure, 0.38 without, rounded out to 0.4."""

EPS_INTERVAL = (0.0, 1.2)
"""The interval the position cost is swept over in a band (``refsim whatif``'s default
``--position-cost-interval``, ``timing breakeven --plot``'s band): what the shared devices' prefills
allow at a verify width of 4 (docs/whatif-terms.md, "eps per verify width": desktop [0, 1.204],
phone 07-12 [0.071, 0.999]). Wider than :data:`EPS_RANGE`, which is the spread of the one
speculation cell's derivation only."""

DEFAULT_IO_THREADS = 4
"""I/O lanes a what-if assumes unless told (the engine's default ``--io-threads``,
bmoe-engine.md §3.4)."""
