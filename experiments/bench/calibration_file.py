"""The calibration file `servesim calibrate` writes: sim/measured/calibration_file.py's format.

Like a `python -m real.calibrate` file it names the deployment (`model`, `device`: the resolved
ModelSpec and GPUSpec; dtypes, `tensor_parallel`) and holds a `roofline` section; its own
section is `cost_model`, the `cluster.cost_model` options fitted to the benchmark (the kind, the
fitted engine terms, `frontend_s`). `cluster.cost_model: {calibration: FILE}` runs them on the
cluster's own cost model (sim/measured/calibrated.py `fitted_cost_model`), after checking the cluster's
model, GPU and tensor parallelism are the fitted ones. The rest records the fit: the policy the
server was simulated with (`policy`, `policy_params`: `servesim run --calibration` uses them),
each benchmark run read (`runs`), per-request errors (`before`, `after`) and the latency
distributions' errors (`metrics`, sim/fit/bench_metrics.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from sim.cluster.cost_model_choice import cost_model_kind, roofline_config
from sim.cluster.spec import ClusterSpec
from sim.fit.bench_fit import BenchFit
from sim.hardware.gpu_file import resolve_gpu
from sim.models.catalog import resolve_model
from traces.bench_results import BenchResult

FORMAT = "servesim.calibration"  # the written file's `format`
FORMAT_VERSION = 1  # bumped when its layout changes
SOURCE = "servesim calibrate"  # the tool that wrote it


def fitted_options(cluster: ClusterSpec, fit: BenchFit) -> dict[str, Any]:
    """The `cluster.cost_model` options the fit stands for."""
    return {**cluster.cost_model, **fit.overrides}


def calibration_dict(fit: BenchFit, results: Sequence[BenchResult], cluster: ClusterSpec,
                     policy: str, params: Mapping[str, Any],
                     metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON written; `metrics` per result: {measured, before, after} tables."""
    options = fitted_options(cluster, fit)
    roofline = roofline_config(options) if cost_model_kind(options) == "roofline" else \
        roofline_config({"kind": "roofline"})
    return {
        "format": FORMAT, "version": FORMAT_VERSION, "source": SOURCE,
        "model": dataclasses.asdict(resolve_model(cluster.model)),
        "device": dataclasses.asdict(resolve_gpu(cluster.gpu)),
        "weight_dtype": cluster.weight_dtype, "kv_dtype": cluster.kv_dtype,
        "tensor_parallel": cluster.tensor_parallel,
        "cluster": {"model": cluster.model, "gpu": cluster.gpu,
                    "tensor_parallel": cluster.tensor_parallel},
        "roofline": dataclasses.asdict(roofline), "cost_model": options,
        "policy": policy, "policy_params": dict(params),
        "runs": [run_record(r) for r in results],
        "before": fit.before.as_dict(), "after": fit.after.as_dict(),
        "metrics": [dict(m) for m in metrics],
        "num_evaluations": fit.num_evaluations, "optimizer": fit.message,
    }


def run_record(result: BenchResult) -> dict[str, Any]:
    """What the file keeps of one benchmark run."""
    rate = result.request_rate
    return {"source": result.source, "format": result.format, "arrivals": result.arrivals,
            "num_requests": len(result.trace), "num_failed": result.num_failed,
            "request_rate": None if rate == float("inf") else rate,
            "burstiness": result.burstiness, "max_concurrency": result.max_concurrency}


def write_calibration(path: str | Path, data: Mapping[str, Any]) -> Path:
    """Write `data` as indented JSON (its folder made); the path written."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return out
