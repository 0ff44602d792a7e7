"""Cancellation of requests whose clients gave up (client timeouts, sim/engine/timeouts.py).

The engine calls `Policy.cancel(request, now)` for a request that is queued, or admitted but
not part of a step in flight; the policy forgets it and frees its KV, then the engine marks it
cancelled. `cancel_paged` serves the paged policies (`vllm`, `vllm_v0`, `sarathi`, through
policies/paged_classes.py), `cancel_orca` serves `orca`.
"""

from __future__ import annotations

from typing import Any

from sim.core.request import Request, RequestStatus


def cancel_paged(policy: Any, r: Request) -> None:
    """Take `r` out of its paged instance: out of the running list with its blocks freed, or
    out of a waiting queue (a preempted request holds no blocks)."""
    if r.status is RequestStatus.RUNNING:
        s = policy.state[r.instance_id]
        s.running.remove(r)
        s.blocks.free(r.request_id, num_computed_tokens=r.num_computed_tokens)
    else:
        waiting = [s.waiting for s in policy.state if r in s.waiting]
        if not waiting:
            raise RuntimeError(f"{policy.name}: request {r.request_id} to cancel is neither "
                               f"running nor waiting")
        waiting[0].remove(r)
    if policy.prefix is not None:
        policy.prefix.forget(r)


def cancel_orca(policy: Any, r: Request) -> None:
    """Take `r` out of its ORCA instance, releasing its reservation when it was admitted."""
    for s in policy.state:
        if r in s.running:
            s.running.remove(r)
            s.reserved -= policy.reservation(r)
            return
        if r in s.waiting:
            s.waiting.remove(r)
            return
    raise RuntimeError(f"orca: request {r.request_id} to cancel is neither running nor waiting")
