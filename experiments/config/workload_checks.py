"""Config checks only the workload can answer, made once it is loaded and before any run.

- Every class a config names (`classes:`, `admission.classes:`, and a policy entry's own) must
  be a class of the workload's requests: the trace's `class` column, or the clients' `class:`.
  `default` (`classes:` only) names the requests without a class, so it needs some. A name that
  matches no request would be ignored: a ConfigError naming it and the known classes.
- A trace with a `timeout_s` column asks for client timeouts: every policy must be able to
  cancel a request (`Policy.supports_cancel`, as the engine checks at a run's start), and the
  backend must be the simulator's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np
import pandas as pd

from experiments.config.classes import CANCELLING_POLICIES
from sim.metrics.class_metrics import NO_CLASS
from sim.util.errors import ConfigError

if TYPE_CHECKING:
    from experiments.config.experiment import ExperimentConfig


def check_workload(cfg: "ExperimentConfig", base: pd.DataFrame | None, source: str) -> None:
    """ConfigError for a class setting or timeout column the runs could not honour; `base` is
    the loaded trace (None for a generated workload), `source` names it in messages."""
    names, unclassed = workload_classes(cfg, base)
    scopes: list[tuple[str, Mapping[str, Any], Any]] = [
        ("classes", cfg.classes, cfg.admission)]
    for i, entry in enumerate(cfg.policies):
        admission = entry.admission if entry.own_admission else None
        scopes.append((f"policies[{i}].classes", entry.classes, admission))
    for prefix, classes, admission in scopes:
        check_class_names(prefix, classes, names, unclassed, source)
        if admission is not None:  # its scopes match a request's class: never `default`
            where = prefix.removesuffix("classes") + "admission.classes"
            check_class_names(where, admission.classes, names, False, source)
    if base is not None and "timeout_s" in base.columns:
        check_trace_timeouts(cfg, base["timeout_s"], source)


def workload_classes(cfg: "ExperimentConfig",
                     base: pd.DataFrame | None) -> tuple[set[str], bool]:
    """(the class names the workload's requests carry, whether some requests carry none)."""
    if base is not None:
        if "class" not in base.columns:
            return set(), True
        cells = base["class"].tolist()
        names = {str(c) for c in cells if c is not None and c == c}
        return names, len(names) == 0 or any(c is None or c != c for c in cells)
    clients = cfg.workload.clients
    if clients is not None:
        labels = [c.request_class for c in clients.clients]
        return {c for c in labels if c is not None}, any(c is None for c in labels)
    return set(), True  # synthetic and session workloads have no classes


def check_class_names(prefix: str, configured: Iterable[str], names: set[str],
                      default: bool, source: str) -> None:
    """ConfigError naming the first configured class that no request of the workload has;
    with `default`, NO_CLASS names the requests without a class."""
    known = sorted(names) + ([NO_CLASS] if default and NO_CLASS not in names else [])
    for name in configured:
        if name in known:
            continue
        have = ", ".join(known) if known else "none"
        hint = (" (admission limits match a request's own class: requests without one are "
                "under the global limits only)" if name == NO_CLASS and not default else "")
        raise ConfigError(f"{prefix}.{name}", name, f"no request of the workload ({source}) "
                          f"has this class, so its settings would be ignored{hint}; its "
                          f"classes: {have}")


def check_trace_timeouts(cfg: "ExperimentConfig", timeouts: pd.Series, source: str) -> None:
    """ConfigError when a policy cannot cancel requests (or a run is on the real backend)
    while the trace has a `timeout_s` column."""
    from policies.registry import get_policy

    values = timeouts.to_numpy(dtype=np.float64)
    finite = int(np.count_nonzero(np.isfinite(values)))
    what = (f"the trace {source} has a timeout_s column ({finite} of {len(values)} rows with a "
            f"finite timeout)")
    for i, entry in enumerate(cfg.policies):
        if not get_policy(entry.name).supports_cancel:
            raise ConfigError(f"policies[{i}].name", entry.name, (
                f"cannot cancel a request whose client gave up, and {what}: client timeouts "
                f"run with {', '.join(CANCELLING_POLICIES)}; drop the column to run this "
                f"policy"))
        backend = cfg.cluster_for(entry).backend
        if backend != "sim" and finite:
            where = f"policies[{i}].cluster" if "backend" in entry.cluster else "cluster"
            raise ConfigError(f"{where}.backend", backend, (
                f"{what}, but client timeouts run with backend: sim only"))
