"""One simulation run with a policy named as in a config: `simulate(trace, "vllm", params, ...)`.

The ground floor (`sim.engine.simulate.run_simulation`) takes a `PolicyFactory`; this module resolves a
policy name through the registry into one, so `sim/` never imports `policies/`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from policies.registry import policy_factory
from sim.core.executor import Executor
from sim.engine.simulate import RunResult, run_simulation

__all__ = ["RunResult", "simulate"]


def simulate(trace: pd.DataFrame, policy_name: str, policy_params: Mapping[str, Any] | None,
             executors: Sequence[Executor], *, seed: int = 0, **options: Any) -> RunResult:
    """Replay `trace` through policy `policy_name` (with `policy_params`, RNG seeded by `seed`)
    on one executor per instance; `options` are `sim.engine.simulate.run_simulation`'s keyword
    arguments (on_done, overhead, max_model_len, max_concurrency, steps_path, admission,
    frontend_s), documented there."""
    return run_simulation(trace, policy_factory(policy_name, policy_params, seed), executors,
                          **options)
