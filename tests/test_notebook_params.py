"""The notebook's parameters come from environment variables; a bad one is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.config.notebook_params import (DEFAULT_CAPACITY_REQUESTS, DEFAULT_RESULTS_DIR,
                                         NotebookParams, params_from_env)
from sim.util.errors import ConfigError


def test_defaults_and_overrides():
    assert params_from_env({}) == NotebookParams(Path(DEFAULT_RESULTS_DIR),
                                                 DEFAULT_CAPACITY_REQUESTS)
    env = {"RESULTS_DIR": "/tmp/sweep", "NOTEBOOK_CAPACITY_REQUESTS": " 60 "}
    assert params_from_env(env) == NotebookParams(Path("/tmp/sweep"), 60)


@pytest.mark.parametrize("env, field", [
    ({"NOTEBOOK_CAPACITY_REQUESTS": "0"}, "NOTEBOOK_CAPACITY_REQUESTS"),
    ({"NOTEBOOK_CAPACITY_REQUESTS": "-5"}, "NOTEBOOK_CAPACITY_REQUESTS"),
    ({"NOTEBOOK_CAPACITY_REQUESTS": "2.5"}, "NOTEBOOK_CAPACITY_REQUESTS"),
    ({"NOTEBOOK_CAPACITY_REQUESTS": "many"}, "NOTEBOOK_CAPACITY_REQUESTS"),
    ({"RESULTS_DIR": " "}, "RESULTS_DIR"),
])
def test_a_bad_variable_is_named_with_its_value(env, field):
    with pytest.raises(ConfigError) as err:
        params_from_env(env)
    assert err.value.field == field and str(err.value).startswith(f"{field}=")
    assert repr(env[field])[1:-1] in str(err.value)


@pytest.mark.parametrize("value", [0, True, 2.0, "60"])
def test_the_dataclass_refuses_a_bad_request_count(value):
    with pytest.raises(ConfigError, match="NOTEBOOK_CAPACITY_REQUESTS"):
        NotebookParams(Path("results"), value)
