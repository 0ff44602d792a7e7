"""The policy interface: the scheduler side of the engine loop.

The engine calls `add_request` on each arrival, `next_step` whenever an instance is idle, and
`update` with the executor's result when a step ends. A policy that holds work back (a batching
delay) names the time it wants an idle instance woken with `next_wakeup_s`, and `drain` tells it
that no request will arrive any more. A policy owns its queues and KV accounting;
it never sees time advance except through these calls, so the same policy drives the SimPy cost
model and the real torch engine.

The interface itself lives in the ground floor, `sim/engine/policy.py` (the engine needs it and sim/
imports nothing above it); this module re-exports it so every `policies.base` import keeps
working.
"""

from __future__ import annotations

from sim.engine.policy import Policy, PolicyConfig, PolicyFactory

__all__ = ["Policy", "PolicyConfig", "PolicyFactory"]
