"""`ccb`: conservative continuous batching, the baseline of the Magnus paper (Cheng et al. 2024).

Iteration-level scheduling (ORCA's): requests join and leave the running batch at any iteration,
without padding. Admission is conservative about memory: each admitted request reserves KV for
its prompt plus the maximum generation length `max_gen_tokens`, so a running batch can never run
out of memory, at the price of memory that is reserved but mostly never used. Requests asking for
more than `max_gen_tokens` outputs are rejected. The scheduling is ORCA's (`policies/orca.py`);
only the names and defaults differ: the batch is limited by memory, not by a small batch size.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import check_positive

from policies.base import PolicyConfig
from policies.orca import OrcaPolicy
from policies.registry import register_policy
from policies.routing import check_router


@dataclass(frozen=True)
class CCBConfig(PolicyConfig):
    max_gen_tokens: int = 2048  # output tokens reserved per request (and the most it may ask)
    max_batch_size: int = 256  # requests per iteration (at most); memory binds first
    router: str = "least_requests"  # how arrivals are spread over instances

    def __post_init__(self) -> None:
        check_positive("max_gen_tokens", self.max_gen_tokens)
        check_positive("max_batch_size", self.max_batch_size)
        check_router(self.router)

    @property
    def max_tokens(self) -> int:
        """ORCA's name for the reserved generation length (tokens)."""
        return self.max_gen_tokens


@register_policy("ccb")
class CCBPolicy(OrcaPolicy):
    Config = CCBConfig  # type: ignore[assignment]
    config: CCBConfig  # type: ignore[assignment]
