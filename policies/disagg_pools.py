"""The two pools of `disagg` (policies/disagg.py): an inner paged policy each, built here.

The prefill pool is an unchanged paged policy (`vllm`, `vllm_v0` or `sarathi`) that serves a
stand-in of each request asking for one output token: it is prefilled, samples its first token
and leaves. The decode pool's policy class is the same kind of policy with `DecodeSide` mixed in:
requests arrive in it with their prompt's KV already computed (transferred), are routed when
their transfer starts, wait in their instance's queue from the moment the KV lands until the
instance has blocks for it (queued, never rejected: decode-side admission waits for memory), and
then decode. A request the decode pool preempts (recompute) is recomputed there as usual.

Prefix caching runs in the prefill pool as its policy has it (on by default in `vllm`, as in
vLLM V1; `prefill_params.enable_prefix_caching` for `vllm_v0` and `sarathi`): a prompt starts
from its cached prefix there, and the prompt's KV the prefill instance holds until its transfer
lands is the prompt's cached blocks themselves (`hold_prompt_kv`), as vLLM keeps a finished
prefill's blocks until the decode side has read them (NixlConnector's delayed free). The decode
pool runs without it: it receives each prompt's whole KV (vLLM's NixlConnector would pull only
the blocks a decode instance lacks; not modelled), so asking for it there is refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from sim.core.executor import InstanceInfo
from sim.core.request import Request
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError

from policies.kv_tier_config import tier_field, uses_kv_tiers
from policies.paged import PagedInstance, PagedPolicy
from policies.registry import get_policy, make_config
from policies.routing import InstanceLoad

POOL_POLICIES = ("vllm", "vllm_v0", "sarathi")  # inner policies a pool may run


class DecodeSide:
    """Mixin over a paged policy: admission of requests whose prompt KV was transferred in."""

    state: list[PagedInstance]
    recorder: Recorder
    instances: list[InstanceInfo]

    def init_decode_side(self, offset: int) -> None:
        """`offset`: the cluster index of this pool's instance 0 (for events)."""
        self.offset = offset
        self.incoming: list[list[Request]] = [[] for _ in self.state]  # in transfer, per instance
        self.landed_s: dict[int, float] = {}  # request id -> when its KV landed, until admitted

    def route_transfer(self, request: Request) -> int:
        """The pool instance a request's KV is sent to: the pool's router over the instances
        whose cache can ever hold it, counting requests in transfer there as waiting."""
        need = request.num_prompt_tokens + 1
        loads = [InstanceLoad(i, [*s.waiting, *self.incoming[i]], s.running,
                              self.num_reserved_kv_tokens(i), self.instances[i].kv_capacity_tokens)
                 for i, s in enumerate(self.state) if not self.never_fits(s, need)]
        i = self.router.route(request, loads)
        self.incoming[i].append(request)
        return i

    def land(self, request: Request, instance: int, time_s: float) -> None:
        """The request's KV is on pool instance `instance` at `time_s`: it queues for blocks."""
        self.incoming[instance].remove(request)
        self.state[instance].waiting.append(request)
        self.landed_s[request.request_id] = time_s

    def note_admitted(self, request: Request, instance: int, now: float) -> None:
        """Record how long a transferred request waited on the instance for KV memory."""
        landed = self.landed_s.pop(request.request_id, None)
        if landed is not None:
            self.recorder.event(now, "decode_kv_wait", request.request_id,
                                f"instance {self.offset + instance}: waited {now - landed:.6f} s "
                                f"for KV memory")

    # ---- admission (PagedPolicy.admit: vllm_v0, sarathi; VllmV1Policy.admit_chunk: vllm) ----
    def admit(self, s: PagedInstance, instance_id: int, now: float) -> Request:
        r = super().admit(s, instance_id, now)  # type: ignore[misc]
        self.note_admitted(r, instance_id, now)
        return r

    def admit_chunk(self, s: PagedInstance, instance_id: int, plan: Any, now: float) -> bool:
        r = s.waiting[0]
        if r.num_computed_tokens == 0:  # preempted here: recomputed as vLLM would
            return super().admit_chunk(s, instance_id, plan, now)  # type: ignore[misc]
        n = r.num_new_tokens  # the first token, sampled on the prefill instance
        if n > plan.budget or (s.blocks.num_blocks_to_allocate(r.num_tokens)
                               > s.blocks.num_free_blocks):
            return False
        s.waiting.popleft()
        s.blocks.allocate(r.request_id, r.num_tokens)
        r.mark_scheduled(now, instance_id)
        s.running.append(r)
        plan.prefills.append(r)
        plan.chunks.append(n)
        plan.budget -= n
        self.note_admitted(r, instance_id, now)
        return True


def pool_policy_class(name: str, field: str, decode: bool) -> type[PagedPolicy]:
    """The inner policy class of a pool (`field` names the config field for errors)."""
    if name not in POOL_POLICIES:
        raise ConfigError(field, name, f"a pool runs one of {', '.join(POOL_POLICIES)} (paged "
                                       f"KV policies); others do not compose with disagg yet")
    cls = get_policy(name)
    if not decode:
        return cls
    return type(f"Decode{cls.__name__}", (DecodeSide, cls), {"name": name})


def pool_params(name: str, params: Mapping[str, Any], field: str,
                decode: bool = False) -> dict[str, Any]:
    """The pool's parameters: no speculation, no KV tiers; in the decode pool, prefix caching
    off (refused when asked)."""
    if not isinstance(params, Mapping):
        raise ConfigError(field, params, "must be a mapping of the pool policy's parameters")
    out = dict(params)
    if decode and out.get("enable_prefix_caching", False) is True:
        raise ConfigError(f"{field}.enable_prefix_caching", True, "the decode pool receives "
                          "each prompt's whole KV from the prefill pool (vLLM's NixlConnector "
                          "would pull only the blocks it lacks; not modelled): prefix caching "
                          "runs in the prefill pool (prefill_params)")
    if out.get("scheduling_policy", "fcfs") != "fcfs":
        raise ConfigError(f"{field}.scheduling_policy", out["scheduling_policy"],
                          "priority scheduling does not compose with disagg yet")
    if out.get("num_speculative_tokens", 0):
        raise ConfigError(f"{field}.num_speculative_tokens", out["num_speculative_tokens"],
                          "speculative decoding does not compose with disagg yet")
    if uses_kv_tiers(out):
        name, value = tier_field(out)
        raise ConfigError(f"{field}.{name}", value, "KV swap and prefix tiers do not compose "
                                                   "with disagg yet")
    if decode and "enable_prefix_caching" in get_policy(name).Config.__dataclass_fields__:
        out["enable_prefix_caching"] = False
    return out


def hold_prompt_kv(pool: PagedPolicy, p: int, r: Request) -> None:
    """Keep `r`'s prompt KV on prefill instance `p` until its transfer lands (its stand-in just
    left, freeing its blocks): with prefix caching the prompt's cached blocks themselves, else
    as many fresh ones."""
    blocks = pool.state[p].blocks
    if pool.prefix is None:
        blocks.allocate(r.request_id, r.num_prompt_tokens)
        return
    keys = pool.prefix.keys(r)[: r.num_prompt_tokens // blocks.block_size]
    pool.prefix.forget(r)
    blocks.allocate(r.request_id, r.num_prompt_tokens, keys=keys)


def build_pool(name: str, params: Mapping[str, Any], infos: Sequence[InstanceInfo],
               recorder: Recorder, rng: np.random.Generator, field: str,
               decode: bool) -> PagedPolicy:
    """One pool's policy over `infos` (renumbered from 0); its errors named under the pool's
    fields (`decode_params.router`)."""
    cls = pool_policy_class(name, f"{field}_policy", decode)
    where = f"{field}_params"
    local = [dataclasses.replace(info, instance_id=i) for i, info in enumerate(infos)]
    try:
        pool = cls(make_config(cls, pool_params(name, params, where, decode), where=where),
                   local, recorder, rng)
    except ConfigError as err:
        if err.field == where or err.field.startswith(f"{where}."):
            raise
        raise ConfigError(f"{where}.{err.field}", err.value, err.reason) from None
    if getattr(pool, "private_blocks", False):  # `vllm`: block tables, for hold_prompt_kv
        pool.use_block_tables()  # looks up the keys of the stand-in that just finished
    return pool
