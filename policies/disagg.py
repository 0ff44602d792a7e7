"""`disagg`: prefill/decode disaggregation with KV transfer (DistServe, Splitwise, Mooncake).

The cluster's first `num_prefill` instances form the prefill pool, the rest the decode pool; each
pool runs its own paged policy (policies/disagg_pools.py) on its own instances (which may be
another GPU type or TP through `cluster.instances` groups). A request arrives at the prefill
pool (its router picks the instance), is prefilled there and samples its first token; its
decode instance is then chosen by the decode pool's router and its prompt's KV is sent over the
link (sim/memory/kv_transfer.py): latency + prompt tokens x KV bytes per token / bandwidth, or the
measured curve; with `layerwise` only what the prefill did not hide. The prefill instance holds
the KV (its blocks) until the transfer lands, then frees it. The first token reaches the user
when the KV lands (TTFT includes the transfer); the request then queues on its decode instance
until blocks are free (never rejected for it) and decodes there. A request with one output token
finishes on the prefill instance (nothing to transfer).

Events: `kv_transfer` when a transfer starts (bytes, seconds, instances, start and landing
times), `decode_kv_wait` when a transferred request is admitted (seconds it waited for memory).

Exactness of decode jumps: a landing is not an arrival, so the engine does not cut a step at it.
A decode step is therefore one iteration while transfers to its instance are pending or the
prefill pool holds any request (a new transfer may start at any prefill step's end); otherwise
the next landing needs a new arrival first, which cuts the step as usual.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass
from typing import Any

from sim.core.executor import Step, StepResult
from sim.core.request import EXCEEDS_KV, Request, RequestStatus
from sim.memory.kv_transfer import exposed_seconds

from policies.base import Policy
from policies.disagg_config import DisaggConfig, check_instances, model_of
from policies.disagg_pools import build_pool, hold_prompt_kv
from policies.registry import register_policy


@dataclass(order=True)
class Transfer:
    """One request's KV in flight from a prefill to a decode instance."""

    lands_s: float  # absolute seconds the KV is on the decode instance
    request_id: int  # ties broken by id: deterministic
    request: Request = dataclasses.field(compare=False)
    prefill: int = dataclasses.field(compare=False)  # prefill pool index
    decode: int = dataclasses.field(compare=False)  # decode pool index


@register_policy("disagg")
class DisaggPolicy(Policy):
    Config = DisaggConfig
    config: DisaggConfig

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        c, infos = self.config, self.instances
        check_instances(c, infos)
        self.kv_bytes_per_token, self.num_layers = model_of(c, infos)  # bytes, layers
        self.link = c.build_link()
        self.np = c.num_prefill  # cluster index of the decode pool's instance 0
        self.prefill = build_pool(c.prefill_policy, c.prefill_params, infos[:self.np],
                                  self.recorder, self.rng, "prefill", decode=False)
        self.decode = build_pool(c.decode_policy, c.decode_params, infos[self.np:],
                                 self.recorder, self.rng, "decode", decode=True)
        self.decode.init_decode_side(self.np)
        self.real: dict[int, Request] = {}  # request id -> the request its stand-in prefills
        self.prefill_s: dict[int, float] = {}  # request id -> seconds of its prefill steps
        self.transfers: list[Transfer] = []  # a heap by landing time
        self.link_free_s = [0.0] * self.np  # when each prefill instance's link is free

    # ---- arrivals --------------------------------------------------------------------------
    def add_request(self, request: Request, now: float) -> bool:
        self.advance(now)
        need = request.num_prompt_tokens + 1
        if all(self.decode.never_fits(s, need) for s in self.decode.state):
            request.reject(now, f"prompt + 1 = {need} tokens need more KV blocks than any "
                                f"decode instance has", EXCEEDS_KV)
            return False
        stand_in = Request(request.request_id, request.arrival_s, request.num_prompt_tokens, 1,
                           app=request.app, session_id=request.session_id,
                           block_ids=request.block_ids, block_tokens=request.block_tokens)
        if not self.prefill.add_request(stand_in, now):
            request.reject(now, stand_in.reason_detail, stand_in.reason)
            return False
        self.real[request.request_id] = request
        return True

    # ---- steps -------------------------------------------------------------------------------
    def next_step(self, instance_id: int, now: float) -> Step | None:
        self.advance(now)
        if instance_id < self.np:
            return self.prefill.next_step(instance_id, now)
        d = instance_id - self.np
        step = self.decode.next_step(d, now)
        if step is None:
            return None
        if step.num_iterations > 1 and self.must_step_once(d):
            self.decode.state[d].num_pending_blocks = 0
            step = dataclasses.replace(step, num_iterations=1)
        return dataclasses.replace(step, instance_id=instance_id)

    def instance_settings(self, instance_id: int) -> dict[str, Any]:
        """The pool's settings for the instance, with the pool named."""
        if instance_id < self.np:
            return {"pool": "prefill", **self.prefill.instance_settings(instance_id)}
        return {"pool": "decode", **self.decode.instance_settings(instance_id - self.np)}

    def must_step_once(self, d: int) -> bool:
        """Whether a KV transfer may land on decode instance `d` before a new arrival."""
        if self.decode.incoming[d]:
            return True
        return any(s.waiting or s.running for s in self.prefill.state)

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        self.advance(now)
        if step.instance_id >= self.np:
            d = step.instance_id - self.np
            done = self.decode.update(dataclasses.replace(step, instance_id=d), result, now)
            for r in done:
                r.instance_id = step.instance_id
            return done
        for rid in step.request_ids:
            self.prefill_s[rid] = self.prefill_s.get(rid, 0.0) + result.duration_s
        finished = []
        for stand_in in self.prefill.update(step, result, now):
            r = self.prefilled(stand_in, step.instance_id, now)
            if r is not None:
                finished.append(r)
        return finished

    def prefilled(self, stand_in: Request, p: int, now: float) -> Request | None:
        """The stand-in left prefill instance `p`: copy its counters to the request, then finish
        it (one output token, or failed) or send its KV. Returns it when it is final."""
        r = self.real.pop(stand_in.request_id)
        overlap_s = self.prefill_s.pop(stand_in.request_id, 0.0)
        r.scheduled_s, r.instance_id = stand_in.scheduled_s, p
        for name in ("num_preemptions", "num_recomputed_tokens", "num_padding_tokens",
                     "num_cached_tokens"):
            setattr(r, name, getattr(stand_in, name))
        if stand_in.status is not RequestStatus.FINISHED:
            r.fail(now, stand_in.reason_detail, stand_in.reason)
            return r
        r.num_computed_tokens = r.num_prompt_tokens
        r.num_output_tokens = 1
        r.first_token_s = r.last_token_s = stand_in.first_token_s
        if r.target_output_tokens == 1:
            r.status, r.finish_s = RequestStatus.FINISHED, stand_in.first_token_s
            return r
        r.status = RequestStatus.RUNNING
        hold_prompt_kv(self.prefill, p, r)  # until the transfer lands
        self.send(r, p, stand_in.first_token_s, overlap_s)
        return None

    def send(self, r: Request, p: int, ready_s: float, overlap_s: float) -> None:
        """Start the transfer of `r`'s prompt KV from prefill instance `p`."""
        d = self.decode.route_transfer(r)
        num_bytes = r.num_prompt_tokens * self.kv_bytes_per_token
        seconds = exposed_seconds(self.link, num_bytes, self.config.layerwise, self.num_layers,
                                  overlap_s)
        start = max(ready_s, self.link_free_s[p]) if self.config.serialize_link else ready_s
        lands = start + seconds
        if self.config.serialize_link:
            self.link_free_s[p] = lands
        heapq.heappush(self.transfers, Transfer(lands, r.request_id, r, p, d))
        self.recorder.event(ready_s, "kv_transfer", r.request_id,
                            f"{num_bytes:.0f} B in {seconds:.6f} s over {self.link.name}: "
                            f"instance {p} -> {self.np + d}, starts {start:.6f}, "
                            f"lands {lands:.6f}")

    def advance(self, now: float) -> None:
        """Land every transfer due by `now`: free its prefill KV, queue it on its decode
        instance; its first token is delivered at the landing time."""
        while self.transfers and self.transfers[0].lands_s <= now:
            t = heapq.heappop(self.transfers)
            self.prefill.state[t.prefill].blocks.free(t.request_id)
            t.request.first_token_s = t.request.last_token_s = t.lands_s
            t.request.instance_id = self.np + t.decode
            self.decode.land(t.request, t.decode, t.lands_s)

    # ---- idle instances, drain, KV ------------------------------------------------------------
    def next_wakeup_s(self, instance_id: int, now: float) -> float:
        self.advance(now)
        if instance_id < self.np:
            own = self.prefill.next_wakeup_s(instance_id, now)
            mine = [t.lands_s for t in self.transfers if t.prefill == instance_id]
        else:
            own = self.decode.next_wakeup_s(instance_id - self.np, now)
            mine = [t.lands_s for t in self.transfers if t.decode == instance_id - self.np]
        return min([own, *mine], default=math.inf)

    def drain(self, now: float) -> None:
        self.prefill.drain(now)
        self.decode.drain(now)

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        if instance_id < self.np:
            return self.prefill.num_reserved_kv_tokens(instance_id)
        return self.decode.num_reserved_kv_tokens(instance_id - self.np)
