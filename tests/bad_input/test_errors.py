"""Errors survive the trip through SimPy and worker processes, and the Python API refuses
absolute arrival times as the trace loaders do."""

from __future__ import annotations

import pickle

import pytest

from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.util.errors import ConfigError, TraceError
from tests.factories import make_trace


def test_config_error_rebuilds_from_its_args_and_pickles():
    err = ConfigError("policies[0].params.batch_size", 8.5, "must be an int")
    for copy in (type(err)(*err.args), pickle.loads(pickle.dumps(err))):
        assert str(copy) == "policies[0].params.batch_size=8.5: must be an int"
        assert (copy.field, copy.value, copy.reason) == (err.field, 8.5, err.reason)


def test_trace_error_pickles_with_its_row_and_field():
    err = TraceError("t.csv", "must be >= 1", row=3, field="prompt_tokens", value=-2)
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err) == "t.csv, row 3, field 'prompt_tokens'=-2: must be >= 1"
    assert (copy.row, copy.field, copy.value) == (3, "prompt_tokens", -2)
    assert str(type(err)(*err.args)) == "t.csv: must be >= 1"


def test_simulate_refuses_absolute_arrival_times():
    trace = make_trace([(1e15, 10, 5), (1e15 + 1, 10, 5)])
    with pytest.raises(ValueError, match=r"row 0: arrival_s=1000000000000000.0 .*starts at 0"):
        simulate(trace, "vllm_v0", {}, build_executors(ClusterSpec()))
