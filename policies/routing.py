"""Routing an arriving request to one instance (for policies with per-instance queues)."""

from __future__ import annotations

from typing import Callable, Sequence

from sim.errors import ConfigError

# a router picks an instance index from per-instance loads (outstanding requests, tokens...)
Router = Callable[[Sequence[int], int], int]


def least_loaded(loads: Sequence[int], request_id: int) -> int:
    """The instance with the smallest load (lowest index on ties)."""
    return min(range(len(loads)), key=loads.__getitem__)


def round_robin(loads: Sequence[int], request_id: int) -> int:
    """Instances in turn, by request id."""
    return request_id % len(loads)


ROUTERS: dict[str, Router] = {"least_loaded": least_loaded, "round_robin": round_robin}


def get_router(name: str) -> Router:
    if name not in ROUTERS:
        raise ConfigError("router", name, f"unknown router; known: {', '.join(ROUTERS)}")
    return ROUTERS[name]
