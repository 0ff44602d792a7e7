"""One SLO form in the docs: bounds in seconds (`ttft_s`, `ttft_p90_s`); the `_ms` names are an
alias that parses to the same SLO (and the same run identity, so results are reused)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from experiments.config.load import load_config
from experiments.sweep.runner import expand, run_hash
from sim.util.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BASE = {"name": "slo_forms", "workload": {"synthetic": {"num_requests": 10}},
        "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
        "policies": [{"name": "orca"}], "request_rates": [1], "seeds": [0]}
PAIRS = [  # (canonical, alias)
    ({"ttft_s": 0.2, "tpot_s": 0.05, "attainment": 0.9},
     {"ttft_ms": 200, "tpot_ms": 50, "attainment": 0.9}),
    ({"ttft_p90_s": 0.2, "tpot_p99_s": 0.05}, {"ttft_p90_ms": 200, "tpot_p99_ms": 50}),
    ({"ttft_s": 1.0, "tpot_s": 0.1}, {"ttft_ms": 1000, "tpot_ms": 100}),
    ({"tbt_p99_s": 0.015, "e2e_p99_s": 30}, {"tbt_p99_ms": 15, "e2e_p99_ms": 30000}),
]


def config(tmp_path: Path, slo: dict):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, "slo": slo}))
    return load_config(path)


@pytest.mark.parametrize("canonical, alias", PAIRS)
def test_the_ms_alias_parses_to_the_same_slo_and_run(tmp_path, canonical, alias):
    a, b = config(tmp_path, canonical), config(tmp_path, alias)
    assert a.slo == b.slo and a.slo.bounds() == canonical_bounds(canonical)
    assert run_hash(a, expand(a)[0]) == run_hash(b, expand(b)[0])  # results are reused


def canonical_bounds(slo: dict) -> dict:
    return {k: float(v) for k, v in slo.items() if k != "attainment"}


def test_a_target_in_both_units_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"slo\.ttft_p90_ms"):
        config(tmp_path, {"ttft_p90_s": 0.2, "ttft_p90_ms": 200})


def test_docs_and_example_configs_use_the_canonical_form():
    configs = sorted((ROOT / "experiments" / "configs").glob("*.yaml"))
    for path in configs:
        slo = (yaml.safe_load(path.read_text()) or {}).get("slo") or {}
        assert not [k for k in slo if k.endswith("_ms")], path.name
    text = (ROOT / "docs" / "policies.md").read_text()
    assert "slo: {ttft_s: 0.2, tpot_s: 0.05, attainment: 0.9}" in text
    assert "slo: {ttft_ms" not in text
