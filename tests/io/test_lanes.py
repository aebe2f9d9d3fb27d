"""Lane assignment of one layer's batch (refsim.io.lanes): hand-worked and properties."""

import pytest
from hypothesis import given, strategies as st

from refsim.errors import ConfigError
from refsim.io.lanes import assign_lanes, engine_lanes


def test_greedy_by_first_idle_lane_hand_worked():
    # costs 5, 3, 3, 1 on 2 lanes: job 0 -> lane 0 (idle at 5), job 1 -> lane 1 (idle at 3),
    # job 2 -> lane 1 (first idle, at 3; then 6), job 3 -> lane 0 (idle at 5; then 6)
    lane, load = assign_lanes([5, 3, 3, 1], 2)
    assert lane.tolist() == [0, 1, 1, 0]
    assert load.tolist() == [6.0, 6.0]


def test_ties_go_to_the_lowest_lane_and_equal_jobs_round_robin():
    lane, load = assign_lanes([7] * 10, 4, overlap=True)
    assert lane.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert load.tolist() == [21.0, 21.0, 14.0, 14.0]


def test_serial_inline_cases():
    # load_layer: io_threads <= 1 or one job -> the caller reads on lane 0
    assert assign_lanes([9], 4)[0].tolist() == [0]
    assert assign_lanes([1, 2, 3], 1)[0].tolist() == [0, 0, 0]
    assert assign_lanes([1, 2, 3], 1)[1].tolist() == [6.0]
    assert assign_lanes([], 3)[1].tolist() == [0.0, 0.0, 0.0]


def test_engine_clamps_the_lanes_to_eight():
    assert [engine_lanes(n) for n in (1, 4, 8, 9, 64)] == [1, 4, 8, 8, 8]
    with pytest.raises(ConfigError):
        engine_lanes(0)
    with pytest.raises(ConfigError):
        assign_lanes([1], 0)
    with pytest.raises(ConfigError):
        assign_lanes([-1], 2)


@given(st.lists(st.integers(0, 10**7), max_size=60), st.integers(1, 8), st.booleans())
def test_lane_properties(costs, lanes, overlap):
    lane, load = assign_lanes(costs, lanes, overlap)
    assert lane.shape == (len(costs),) and ((lane >= 0) & (lane < lanes)).all()
    assert load.sum() == sum(costs)                      # every request served once
    for k in range(lanes):
        assert load[k] == sum(c for c, l in zip(costs, lane) if l == k)
    if costs:                                            # list scheduling's bound (Graham 1966)
        assert load.max() <= sum(costs) / lanes + max(costs) + 1e-9
        assert load.max() >= max(sum(costs) / lanes, max(costs)) - 1e-9
