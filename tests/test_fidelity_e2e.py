"""experiments.fidelity.e2e: end-to-end step times (splitwise-sim's perf_model.csv layout)
against the cost model; a table generated from the model itself reads back with zero error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments.fidelity.e2e import main, predict_rows, read_perf_table
from sim.cluster.cost_model_choice import build_cost_model
from sim.cost.cost_model import DeploymentSpec
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model
from sim.util.errors import ConfigError


def perf_table(options: dict[str, Any], repeats: int = 2) -> pd.DataFrame:
    """Rows in splitwise's layout whose times are the cost model's own predictions (ms)."""
    rows = []
    for tp in (2, 4):
        cost = build_cost_model(DeploymentSpec(get_model("llama-2-70b"), get_gpu("A100-80GB"),
                                               tp), options)
        for b, prompt, out in ((1, 512, 128), (8, 1024, 128), (32, 512, 256)):
            kv = prompt + out // 2
            dec = cost.iteration_times_from_sums(b, b * kv, b * kv, b, b, b)[0]
            pre = cost.iteration_times_from_sums(b * prompt, 0, 0, b * prompt ** 2, b, b)[0]
            rows += [{"model": "llama2-70b", "hardware": "a100-80gb", "tensor_parallel": tp,
                      "prompt_size": prompt, "batch_size": b, "token_size": out,
                      "prompt_time": pre * 1e3, "token_time": dec * 1e3}] * repeats
    rows.append({**rows[0], "hardware": "tpu-v9"})  # an unmapped GPU: skipped, not guessed
    return pd.DataFrame(rows)


def test_the_models_own_times_read_back_with_zero_error(tmp_path: Path) -> None:
    path = tmp_path / "perf.csv"
    perf_table({"kind": "stage", "cpu_launch_per_layer_s": 3e-4}).to_csv(path, index=False)
    table = read_perf_table(path)
    assert len(table) == 7  # repeats reduced to one row per shape
    rows, skipped = predict_rows(table, {"kind": "stage", "cpu_launch_per_layer_s": 3e-4},
                                 {"llama2-70b": "llama-2-70b"}, {"a100-80gb": "A100-80GB"})
    assert skipped == ["llama2-70b on tpu-v9"]
    assert len(rows) == 12 and rows["rel_err"].abs().max() < 1e-9
    assert set(rows["regime"]) == {"prefill", "decode b <= 8", "decode b >= 16"}
    plain, _ = predict_rows(table, {"kind": "stage"}, {"llama2-70b": "llama-2-70b"},
                            {"a100-80gb": "A100-80GB"})
    assert (plain["rel_err"] <= 1e-9).all()  # without the launch floor: never slower


def test_cli_writes_rows_and_summary(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "perf.csv"
    perf_table({"kind": "stage"}).to_csv(path, index=False)
    assert main([str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "skipped llama2-70b on tpu-v9" in out and "decode median |error| 0.0%" in out
    assert (tmp_path / "out" / "summary.csv").is_file()
    assert main([str(path), "--set", "cpu_step_s=fast", "--out", str(tmp_path / "o")]) == 2
    assert "--set cpu_step_s" in capsys.readouterr().err


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.drop(columns=["token_time"]), "perf_csv.token_time"),
    (lambda d: d.assign(batch_size=["x"] * len(d)), "perf_csv.batch_size"),
    (lambda d: d.assign(prompt_time=0.0), "perf_csv.prompt_time"),
])
def test_malformed_tables_name_the_column(tmp_path: Path, edit: Any, field: str) -> None:
    path = tmp_path / "bad.csv"
    edit(perf_table({"kind": "stage"}, repeats=1)).to_csv(path, index=False)
    with pytest.raises(ConfigError) as info:
        read_perf_table(path)
    assert info.value.field == field
