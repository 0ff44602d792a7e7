"""A resumed sweep reports only what simulations produced: summaries are rebuilt from the runs on
disk, and a run whose files were edited, swapped or truncated is rerun, saying so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from experiments.files.resume import file_sha256
from tests.bad_input.test_sweep import RUN, SYNTH, count_runs, printed, sweep  # noqa: F401

OTHER = "orca__rate2__seed0"  # SYNTH's other run: as many requests as RUN


def summary(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "summary.csv").set_index("run")


@pytest.mark.parametrize("names", [("summary.csv",), ("summary.csv", "summary.json")])
def test_a_deleted_summary_is_rebuilt_when_every_run_is_reused(tmp_path, count_runs, names):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    before = {name: (out / name).read_bytes() for name in ("summary.csv", "summary.json")}
    for name in names:
        (out / name).unlink()
    assert sweep(tmp_path, out) == 0
    assert len(count_runs) == 2  # nothing simulated again
    assert {name: (out / name).read_bytes() for name in before} == before


def test_an_edited_summary_csv_is_repaired_from_the_runs(tmp_path, count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    before = (out / "summary.csv").read_bytes()
    frame = pd.read_csv(out / "summary.csv")
    frame.loc[0, "request_throughput"] = 1e9
    frame = pd.concat([frame, frame.assign(run="made__rate9__seed9")])  # a run nobody ran
    frame.to_csv(out / "summary.csv", index=False)
    assert sweep(tmp_path, out) == 0
    assert (out / "summary.csv").read_bytes() == before and len(count_runs) == 2


def _edit_records(run: Path) -> None:
    frame = pd.read_parquet(run / "records.parquet")
    frame.loc[0, "output_tokens"] += 1  # same rows, one value changed
    frame.to_parquet(run / "records.parquet", index=False)


def _swap_records(runs: Path) -> None:
    a, b = runs / RUN / "records.parquet", runs / OTHER / "records.parquet"
    tmp = a.with_name("swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def test_edited_records_are_detected_and_rerun(tmp_path, capsys, count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    original = (out / "runs" / RUN / "records.parquet").read_bytes()
    _edit_records(out / "runs" / RUN)
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    assert (f"{RUN}: not reused: corrupt: records.parquet is not the file this run wrote "
            f"(edited, truncated or swapped") in printed(capsys)
    assert len(count_runs) == 3  # the edited run only
    assert (out / "runs" / RUN / "records.parquet").read_bytes() == original


def test_two_runs_swapped_records_are_detected_and_both_rerun(tmp_path, capsys, count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    runs = out / "runs"
    originals = {r: (runs / r / "records.parquet").read_bytes() for r in (RUN, OTHER)}
    assert len(pd.read_parquet(runs / RUN / "records.parquet")) == \
        len(pd.read_parquet(runs / OTHER / "records.parquet"))  # row counts cannot tell
    _swap_records(runs)
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    text = printed(capsys)
    for run in (RUN, OTHER):
        assert f"{run}: not reused: corrupt: records.parquet is not the file this run " \
               f"wrote" in text
        assert (runs / run / "records.parquet").read_bytes() == originals[run]
    assert len(count_runs) == 4


def test_an_edited_value_in_a_runs_summary_json_is_rerun(tmp_path, capsys, count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    path = out / "runs" / RUN / "summary.json"
    data = json.loads(path.read_text())
    data["request_throughput"] = 1e9
    path.write_text(json.dumps(data, indent=2) + "\n")
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    assert f"{RUN}: not reused: corrupt: summary.json is not the file this run wrote" in \
        printed(capsys)
    assert len(count_runs) == 3 and 1e9 not in summary(out)["request_throughput"].tolist()


def test_digests_of_every_file_are_written_with_the_run(tmp_path):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    run = out / "runs" / RUN
    digests = json.loads((run / "config.json").read_text())["digests"]
    assert sorted(digests) == ["events.parquet", "instances.parquet", "records.parquet",
                               "steps.parquet", "summary.json"]
    assert all(digests[name] == file_sha256(run / name) for name in digests)


def test_a_run_without_digests_is_rerun(tmp_path, capsys, count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    path = out / "runs" / RUN / "config.json"
    config = json.loads(path.read_text())
    del config["digests"]
    path.write_text(json.dumps(config))
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    assert f"{RUN}: not reused: stale: written by an older servesim (no content digests" in \
        printed(capsys)
    assert len(count_runs) == 3


# ---- interrupted, damaged, rerun: every reported number is one a simulation produced ----------
FOUR = dict(SYNTH, seeds=[0, 1])  # four runs of 12 requests each


def _interrupt_after(monkeypatch, runs: int) -> None:
    import experiments.run
    real = experiments.run.persist
    calls: list = []

    def persist(*args, **kwargs):
        if len(calls) == runs:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(experiments.run, "persist", persist)


def _fail_run(monkeypatch, policy: str, seed: int) -> None:
    import policies.simulate
    real = policies.simulate.simulate

    def simulate(trace, name, *args, **kwargs):
        if name == policy and kwargs.get("seed") == seed:
            raise RuntimeError("injected")
        return real(trace, name, *args, **kwargs)

    monkeypatch.setattr(policies.simulate, "simulate", simulate)


def test_an_interrupted_edited_swapped_sweep_never_reports_unproduced_numbers(tmp_path):
    assert sweep(tmp_path, tmp_path / "whole", FOUR) == 0
    whole = summary(tmp_path / "whole")
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        _interrupt_after(mp, 3)
        assert sweep(tmp_path, out, FOUR) == 130
    assert len(pd.read_csv(out / "summary.csv")) == 3
    runs = out / "runs"
    _swap_records(runs)  # vanilla and orca, seed 0
    bogus = pd.read_csv(out / "summary.csv")
    bogus["mean_e2e_s"] = 123.0  # a number no simulation produced
    bogus.to_csv(out / "summary.csv", index=False)
    shutil.copy(runs / "vanilla__rate2__seed1" / "summary.json", runs / RUN / "summary.json")
    with pytest.MonkeyPatch.context() as mp:
        _fail_run(mp, "vanilla", 0)  # the damaged run cannot be redone this time
        assert sweep(tmp_path, out, FOUR) == 1
    partial = summary(out)
    assert RUN not in partial.index and len(partial) == 3
    pd.testing.assert_frame_equal(partial, whole.loc[partial.index])
    assert json.loads((out / "summary.json").read_text())[0]["run"] != RUN
    assert sweep(tmp_path, out, FOUR) == 0
    pd.testing.assert_frame_equal(summary(out), whole)
