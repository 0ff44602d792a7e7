"""One simulation run with a policy named as in a config: `simulate(trace, "vllm", params, ...)`.

The ground floor (`sim.engine.simulate.run_simulation`) takes a `PolicyFactory`; this module resolves a
policy name through the registry into one, so `sim/` never imports `policies/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from policies.registry import policy_factory
from sim.core.executor import Executor
from sim.cost.overhead import SchedulingOverhead
from sim.engine.admission import AdmissionConfig
from sim.engine.simulate import RunResult, run_simulation

__all__ = ["RunResult", "simulate"]


def simulate(trace: pd.DataFrame, policy_name: str, policy_params: Mapping[str, Any] | None,
             executors: Sequence[Executor], *, seed: int = 0,
             on_done: Callable[[int], None] | None = None,
             overhead: SchedulingOverhead | None = None,
             max_model_len: int | None = None,
             max_concurrency: int | None = None,
             steps_path: Path | str | None = None,
             admission: AdmissionConfig | None = None,
             frontend_s: float = 0.0) -> RunResult:
    """Replay `trace` through policy `policy_name` (with `policy_params`, RNG seeded by `seed`)
    on one executor per instance; see `sim.engine.simulate.run_simulation` for the rest."""
    return run_simulation(trace, policy_factory(policy_name, policy_params, seed), executors,
                          on_done=on_done, overhead=overhead, max_model_len=max_model_len,
                          max_concurrency=max_concurrency, steps_path=steps_path,
                          admission=admission, frontend_s=frontend_s)
