"""Checks a sweep or a capacity search makes before anything runs (shared by run and capacity)."""

from __future__ import annotations

from experiments.config_checks import rebase
from experiments.executors import build_executors
from sim.cluster import ClusterSpec
from sim.errors import ConfigError
from sim.limits import resolve_max_model_len


def check_cluster(spec: ClusterSpec, where: str = "cluster") -> None:
    """Build the executors once so that cost-model errors surface before any run."""
    try:
        if spec.backend == "real":  # building loads a model: check its options only
            from real.options import check_real_cluster  # lazy: torch only for this backend
            check_real_cluster(spec)
        else:
            resolve_max_model_len(build_executors(spec), spec.max_model_len)
    except ConfigError as err:
        raise rebase(where, err) from None
