"""A cluster's serving-frontend latency, for the run (sim/cost/frontend.py): `frontend_kwargs`.

`cluster.cost_model.frontend_s`, or that of the benchmark calibration its `calibration: FILE`
names (sim/measured/calibrated.py `fitted_cost_model`), the cluster's own key first; refused with the
real backend, whose replay models no frontend.
"""

from __future__ import annotations

from typing import Any

from sim.cluster.spec import deployment_names
from sim.cost.frontend import KEY, WHERE, frontend_of
from sim.measured.calibrated import fitted_cost_model
from sim.util.errors import ConfigError


def cluster_frontend_s(cluster: Any) -> float:
    """Seconds of frontend latency a ClusterSpec names: its cost_model's `frontend_s`, or that
    of the benchmark calibration its `calibration: FILE` names (its own key first)."""
    options = cluster.cost_model
    if "calibration" in options and KEY not in options:
        fitted = fitted_cost_model(options, *deployment_names(cluster))
        options = fitted if fitted is not None else options
    value = frontend_of(options)
    if value and cluster.backend != "sim":
        raise ConfigError(WHERE, value, "a modelled latency: only with backend: sim (the real "
                                        "engine's replay has no frontend)")
    return value


def frontend_kwargs(cluster: Any) -> dict[str, float]:
    """`{"frontend_s": s}` for `policies.simulate.simulate` when the cluster names a non-zero
    frontend latency, else {}."""
    value = cluster_frontend_s(cluster)
    return {KEY: value} if value else {}
