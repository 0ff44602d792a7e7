"""The `engine` section of a calibration: `EngineTimeParams` fitted on a profile and replays.

Structural choices come from the profiled engine (`PROFILE.json`): an `sdpa` engine pads its
decode batch to the longest KV and, on CUDA, plans a kernel per attention shape (shapes padded to
the block size); the paged kernels read each row's own KV and have no per-shape cost. The fitted
constants are the rest of `EngineTimeParams`. With replayed steps (`--steps RUN_DIR ...`), every
step is also predicted by a fit that never saw it (k folds), and the section records those
held-out errors per run beside the in-sample ones.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from real.fit_engine import (cross_validate, error_stats, fit_data, fit_engine, predict,
                             stats_by_source)
from real.step_log import run_samples
from sim.cost.engine_time import EngineTimeParams, EngineWork
from sim.hardware.gpus import GPUSpec
from sim.models.catalog import ModelSpec

WARMUP_ITERATIONS = 2  # the real engine's default warm-up (TorchExecutor.warmup_iterations)


def structural_params(meta: dict[str, Any]) -> EngineTimeParams:
    """decode_kv, shape_granularity, max_graph_batch, max_graph_tokens and decode_split_sms of
    the profiled engine (a profile written before engines recorded `max_graph_batch` ran every
    iteration eagerly, one before `max_graph_tokens` every iteration with prefill chunks; one
    without `num_sms` leaves the split-KV plan unmodelled)."""
    backend = str(meta.get("attention_backend", "sdpa"))
    sdpa = backend.startswith("sdpa")
    on_gpu = str(meta.get("device", "cpu")).startswith("cuda")
    granularity = int(meta.get("block_size", 16)) if sdpa and on_gpu else 0
    graphs = int(meta.get("max_graph_batch", 0) or 0) if meta.get("cuda_graphs") else 0
    mixed = int(meta.get("max_graph_tokens", 0) or 0) if graphs else 0
    split_sms = int(meta.get("num_sms", 0) or 0) if backend == "paged" and on_gpu else 0
    return EngineTimeParams(decode_kv="padded" if sdpa else "paged",
                            shape_granularity=granularity, max_graph_batch=graphs,
                            max_graph_tokens=mixed, decode_split_sms=split_sms)


def engine_section(profile: pd.DataFrame | None, meta: dict[str, Any], model: ModelSpec,
                   device: GPUSpec, run_dirs: Sequence[str | Path] = (), folds: int = 5
                   ) -> dict[str, Any]:
    """The calibration's `engine` section: params, fit errors, held-out errors per run."""
    base = structural_params(meta)
    work = EngineWork.of(model, device, str(meta.get("dtype", "bf16")))
    samples = run_samples([Path(d) for d in run_dirs],
                          int(meta.get("kv_capacity_tokens", 2**20)),
                          model.max_position_embeddings, base.shape_granularity,
                          WARMUP_ITERATIONS) if run_dirs else []
    data = fit_data(profile, samples)
    params = fit_engine(data, work, base)
    section: dict[str, Any] = {
        "params": dataclasses.asdict(params), "warmup_iterations": WARMUP_ITERATIONS,
        "fit": {"in_sample": stats_by_source(predict(params, work, data), data)},
        "steps": {str(d): int(np.sum(data.source == Path(d).name)) for d in run_dirs}}
    if samples and folds >= 2:
        held = cross_validate(data, work, base, folds)
        section["fit"]["held_out"] = {
            "folds": folds, **{run: error_stats(held[data.source == run],
                                                data.measured[data.source == run])
                               for run in dict.fromkeys(s.run for s in samples)}}
    return section


def format_engine_fit(section: dict[str, Any]) -> list[str]:
    """Report lines of an engine section's fit."""
    lines = [f"engine: {section['params']}"]
    for kind in ("in_sample", "held_out"):
        for source, stats in section["fit"].get(kind, {}).items():
            if isinstance(stats, dict) and stats.get("n"):
                lines.append(f"engine {kind.replace('_', '-')} {source} ({stats['n']} "
                             f"{'rows' if source.startswith('profile') else 'steps'}): median "
                             f"{stats['median_abs_rel_err']:.3f}, p90 "
                             f"{stats['p90_abs_rel_err']:.3f}, bias {stats['bias']:+.3f}")
    return lines
