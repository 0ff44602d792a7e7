"""A cluster's executors for either backend: the cost model (`sim.cluster.spec`) or the torch engine.

`sim/` may not import `real/`, so the real backend is plugged in here, above both.
"""

from __future__ import annotations

from typing import Any

from sim.cluster.spec import ClusterSpec
from sim.cluster.spec import build_executors as build_sim_executors


def _build_real(spec: ClusterSpec) -> list[Any]:
    from real.options import build_real_executors  # lazy: torch only for this backend

    return build_real_executors(spec)


def build_executors(spec: ClusterSpec) -> list[Any]:
    """One executor per instance of `spec`, `backend: real` included."""
    return build_sim_executors(spec, real=_build_real)
