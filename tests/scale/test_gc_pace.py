"""The run's collection pacing restores the caller's thresholds and never enables a disabled
collector."""

import gc

from sim.engine.gc_pace import RUN_THRESHOLDS, paced_gc


def test_thresholds_raised_inside_and_restored_after() -> None:
    before = gc.get_threshold()
    with paced_gc():
        inside = gc.get_threshold()
    assert inside == tuple(max(a, b) for a, b in zip(RUN_THRESHOLDS, before))
    assert gc.get_threshold() == before


def test_restored_after_an_error() -> None:
    before = gc.get_threshold()
    try:
        with paced_gc():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.get_threshold() == before


def test_a_zero_threshold_stays_zero() -> None:
    before = gc.get_threshold()
    gc.set_threshold(0, before[1], before[2])
    try:
        with paced_gc():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
