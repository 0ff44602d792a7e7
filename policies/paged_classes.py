"""Request classes on the paged policies (`vllm`, `vllm_v0`, `sarathi`): cancellation of
requests whose clients gave up, and priority scheduling when the config asks for it.

`PagedClasses` is a base of those policy classes. A policy whose config has `scheduling_policy:
priority` is built as its class with `PriorityScheduling` mixed in (policies/priority.py), so
the FCFS classes run exactly the code they always ran.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sim.core.request import Request
from sim.util.errors import ConfigError

from policies.cancel import cancel_paged
from policies.priority import check_scheduling, priority_variant


class PagedClasses:
    """`cancel` for a paged policy, and its priority variant when its config asks."""

    supports_cancel: ClassVar[bool] = True

    def __new__(cls, config: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(config, "scheduling_policy", "fcfs") == "priority":
            cls = priority_variant(cls)
        return super().__new__(cls)

    def cancel(self, request: Request, now: float) -> None:
        cancel_paged(self, request)


def check_classes_config(config: Any) -> None:
    """The scheduling fields of a paged policy's config (`scheduling_policy`,
    `priority_aging_s`); ConfigError naming the bad one."""
    check_scheduling(config.scheduling_policy, config.priority_aging_s)


def refuse_priority(config: Any, policy: str, why: str) -> None:
    """ConfigError when a policy that orders its queue its own way is asked for priorities."""
    if config.scheduling_policy != "fcfs" or config.priority_aging_s is not None:
        field = "scheduling_policy" if config.scheduling_policy != "fcfs" else "priority_aging_s"
        raise ConfigError(field, getattr(config, field), f"{policy} {why}")
