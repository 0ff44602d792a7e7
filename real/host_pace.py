"""How fast the host ran during a replay, against the calibration: eager vs CUDA-graph steps.

A CUDA-graph decode iteration runs at the GPU's pace; an iteration launched kernel by kernel
(any prefill chunk, on a CUDA-graph engine; every iteration on an eager one) runs at the host
CPU's pace. On a shared or virtualised machine the CPU's speed can change by 2x within minutes,
so an engine model fitted on a profile timed at one pace mispredicts replays run at another,
and the simulation's metric errors then measure the machine, not the model. This module reads
a replay's logged steps against the calibrated engine model and reports, separately, the
measured / modelled time of the eager iterations the model calls host-bound (launches outlast
the GPU work) and of the iterations replayed from graphs. Graph ratios near 1 with eager ratios
away from it (the median, or a tenth of them) is host drift; `drift_note` says so in words.
Torch-free.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from sim.cost.engine_time import EngineTimeModel, step_iteration_features

DRIFT_TOLERANCE = 0.10  # |median eager ratio - median graph ratio| above this is host drift
SPREAD_TOLERANCE = 0.25  # an eager p10 / p90 this far beyond the graphs' is drift within a run


def _stats(ratios: Sequence[float]) -> dict[str, float]:
    if not len(ratios):
        return {"n": 0}
    r = np.asarray(ratios, dtype=np.float64)
    return {"n": int(len(r)), "median": float(np.median(r)),
            "p10": float(np.percentile(r, 10)), "p90": float(np.percentile(r, 90))}


def host_pace(step_log: Sequence[Any], model: EngineTimeModel, new_shape_s: float = 0.0
              ) -> dict[str, dict[str, float]]:
    """Measured / modelled seconds of eager iterations and of graph-replayed ones (the model
    with its first-run shape cost, `new_shape_s` per shape an iteration ran first)."""
    eager, graph = [], []
    for entry in step_log:
        m = len(entry.iteration_ends_s)
        if m == 0 or entry.step.num_seqs == 0:
            continue
        synced = bool(getattr(entry, "synced", False))
        feats = step_iteration_features(entry.step, m, synced)
        modelled = model.times(feats)
        if new_shape_s:
            modelled = modelled + new_shape_s * np.asarray(entry.new_shapes, dtype=float)[:m]
        ratio = np.diff(entry.iteration_ends_s, prepend=0.0) / modelled
        launched = model.eager(feats) > 0
        eager += ratio[launched & (model.host_s(feats) > model.device_s(feats))].tolist()
        graph += ratio[~launched].tolist()  # device-bound eager iterations count in neither
    return {"eager": _stats(eager), "graph": _stats(graph)}


def drift_note(pace: dict[str, dict[str, float]]) -> str | None:
    """A sentence when eager iterations ran at another pace than the model and the graphs,
    else None (also when either kind is missing)."""
    eager, graph = pace.get("eager", {}), pace.get("graph", {})
    if not eager.get("n") or not graph.get("n"):
        return None
    gap = eager["median"] - graph["median"]
    spread = max(graph["p10"] - eager["p10"], eager["p90"] - graph["p90"])
    if abs(gap) <= DRIFT_TOLERANCE and spread <= SPREAD_TOLERANCE:
        return None
    return (f"host drift: host-bound eager iterations took {eager['median']:.2f}x the "
            f"calibrated time (p10 {eager['p10']:.2f}, p90 {eager['p90']:.2f}) while "
            f"CUDA-graph iterations took {graph['median']:.2f}x: the host CPU ran at another "
            f"speed than when the profile was timed, so this replay's metric errors measure "
            f"the machine as well as the model")
