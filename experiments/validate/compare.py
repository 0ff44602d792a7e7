"""One real replay against the calibrated simulator, and the validation's files.

Shared by `experiments.validate.main` (which replays each policy on the engine) and
`experiments.validate.replayed` (which reads replays recorded earlier, so a new calibration is
checked on a CPU): each policy's replay is simulated with every calibrated model at the engine's
KV capacity, block size and context limit, then compared metric by metric, step by step and by
host pace, and the results go to OUT as `experiments/validate/main.py`'s docstring lists.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from experiments.report.results import write_json, write_run


@dataclass(frozen=True)
class EngineInfo:
    """What the simulation needs to know about the engine that ran the replays."""

    name: str  # the engine's description, e.g. "llama-2-7b bf16 on cuda [paged]"
    attention_backend: str  # paged, sdpa, ...
    kv_capacity_tokens: int  # tokens of KV the engine held
    block_size: int  # tokens per KV block
    max_model_len: int  # tokens: the engine's context limit


@dataclass(frozen=True)
class RealReplay:
    """One policy's replay on the engine, as measured."""

    label: str  # the policy entry's label
    name: str  # registered policy name
    params: Mapping[str, Any]  # the policy's params
    summary: Mapping[str, float]  # the replay's summary metrics
    records: pd.DataFrame  # per request
    steps: pd.DataFrame  # per step
    step_log: Sequence[Any]  # every Step with its measured iteration ends (real/step_log.py)
    seen: tuple = ()  # attention shapes the engine had run before the replay
    wall_s: float = 0.0  # seconds the replay took on the wall clock


@dataclass
class Collected:
    """Every policy's comparison rows, gathered for the validation's files."""

    metrics: list = field(default_factory=list)  # metric_errors rows
    steps: list = field(default_factory=list)  # step_errors rows
    pairs: dict = field(default_factory=dict)  # (label, kind) -> measured vs predicted steps
    records: dict = field(default_factory=dict)  # (label, kind) -> records
    failures: dict = field(default_factory=dict)  # label -> error
    paces: list = field(default_factory=list)  # host_pace rows

    def add(self, res: dict[str, Any]) -> None:
        self.metrics += res["metrics"]
        self.steps += res["steps"]
        self.pairs.update(res["pairs"])
        self.records.update(res["records"])
        self.paces += [res["host_pace"]] if "host_pace" in res else []


def compare_replay(real: RealReplay, trace: pd.DataFrame, engine: EngineInfo,
                   calibration: Path, kinds: Sequence[str], seed: int, out: Path
                   ) -> dict[str, Any]:
    """Simulate the replay's trace and policy with each calibrated model; its error rows."""
    from policies.simulate import simulate
    from real.compare import (abs_rel_stats, metric_errors, same_shape_pairs,
                              step_errors_by_order)
    from real.host_pace import host_pace
    from sim.measured.calibrated import load_calibrated_executor

    res: dict[str, Any] = {"metrics": [], "steps": [], "pairs": {},
                           "records": {(real.label, "real"): real.records}}
    for kind in kinds:
        sim_ex = load_calibrated_executor(calibration, kind, engine.kv_capacity_tokens,
                                          engine.block_size, seen_shapes=real.seen)
        sim = simulate(trace, real.name, dict(real.params), [sim_ex], seed=seed,
                       max_model_len=engine.max_model_len)  # the engine's own limit
        write_run(out / "runs" / f"{real.label}__{kind}", sim, {
            "policy": real.name, "params": dict(real.params), "calibration": str(calibration),
            "kind": kind})
        res["records"][(real.label, kind)] = sim.records
        key = {"policy": real.label, "kind": kind}
        res["metrics"] += [{**key, **row} for row in metric_errors(real.summary, sim.summary)]
        pairs, meas_it, pred_it = same_shape_pairs(real.step_log, sim_ex.times,
                                                   sim_ex.new_shape_s)
        res["pairs"][(real.label, kind)] = pairs
        if kind == "engine":
            res["host_pace"] = {"policy": real.label, **host_pace(
                real.step_log, sim_ex.times, sim_ex.new_shape_s)}
        res["steps"] += [
            {**key, "match": "order", **step_errors_by_order(real.steps, sim.steps)},
            {**key, "match": "same_shape_step",
             **abs_rel_stats(pairs["predicted_s"].to_numpy(), pairs["measured_s"].to_numpy())},
            {**key, "match": "same_shape_iteration", **abs_rel_stats(pred_it, meas_it)}]
    res["real_wall_s"] = real.wall_s
    return res


def write_validation(name: str, engine: EngineInfo, num_requests: int, calibration: Path,
                     got: Collected, out: Path, start: float,
                     extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """metric_errors.csv, step_errors.csv, the figures and validation.json; returns the last."""
    from real.plots import latency_cdfs, step_scatter
    from sim.util.jsonfile import read_json_object

    pd.DataFrame(got.metrics).to_csv(out / "metric_errors.csv", index=False)
    pd.DataFrame(got.steps).to_csv(out / "step_errors.csv", index=False)
    if got.pairs:
        step_scatter(got.pairs, out / "step_scatter.png")
        latency_cdfs(got.records, out / "latency_cdf.png")
    summary = {"name": name, "engine": engine.name,
               "attention_backend": engine.attention_backend,
               "kv_capacity_tokens": engine.kv_capacity_tokens,
               "block_size": engine.block_size, "num_requests": num_requests,
               "calibration": str(calibration),
               "fit": read_json_object(calibration, "--calibration", "calibration").get("fit"),
               **dict(extra or {}),
               "metrics": got.metrics, "steps": got.steps, "failures": got.failures,
               "host_pace": got.paces, "wall_s": time.perf_counter() - start}
    write_json(out / "validation.json", summary)
    return summary
