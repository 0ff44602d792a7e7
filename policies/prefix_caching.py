"""Prefix KV reuse for the paged policies (`enable_prefix_caching`; vLLM's automatic prefix
caching).

Per request, the content keys of its leading full KV blocks come from the trace's content ids
(`block_ids` covering `block_tokens` tokens each; `sim/memory/prefix_keys.py`); a request without them
never hits and never fills the cache. On admission the longest run of cached blocks matching the
request's keys is shared (`BlockManager.allocate(..., keys=...)`) and their tokens count as
computed, capped so at least one token is still computed (vLLM recomputes the last prompt token on
a full hit, to sample from it). The Step still lists them as context: attention over cached KV is
real work. After every step, blocks that became full and computed are registered under their keys
(prompt blocks and, when the ids cover them, output blocks), so a finished or preempted request
leaves its blocks cached (evictable, LRU) for later requests on the same instance. With a host
(and remote) prefix tier, evicted blocks are demoted there and a hit on them is promoted back
(sim/memory/kv_tiers.py); the request's `num_host_hit_tokens` / `num_remote_hit_tokens` count them.

With `own_keys` (`vllm` with KV offload tiers, policies/vllm_offload.py) the blocks the trace's
ids do not cover get keys too, private to the request (vLLM V1 hashes every request's tokens;
without content ids a request shares them with no one): its own blocks are then cached, stored
to the offload tiers and found again when it is admitted after a preemption.
"""

from __future__ import annotations

from sim.core.request import Request
from sim.memory.block_manager import BlockManager
from sim.memory.kv_tiers import TieredBlockManager
from sim.memory.prefix_keys import BlockKey, block_keys
from sim.util.errors import ConfigError


class PrefixCaching:
    """The prefix-cache side of a paged policy: keys per request, lookups and registration."""

    def __init__(self, block_size: int, own_keys: bool = False) -> None:
        self.block_size = block_size  # tokens per KV block
        self.own_keys = own_keys  # key the blocks no content id covers, privately
        self._keys: dict[int, list[BlockKey]] = {}  # request id -> its full blocks' keys

    def keys(self, r: Request) -> list[BlockKey]:
        """The content keys of `r`'s leading full blocks (computed once per request)."""
        keys = self._keys.get(r.request_id)
        if keys is None:
            if r.block_ids and r.block_tokens is None:  # loud: caching would silently be off
                raise ValueError(f"request {r.request_id}: block_tokens=None with block_ids="
                                 f"{list(r.block_ids[:8])}: prefix caching cannot key its blocks")
            if r.block_ids is None or r.block_tokens is None:
                keys = []
            else:
                keys = block_keys(r.block_ids, r.block_tokens, self.block_size,
                                  r.num_prompt_tokens, r.max_tokens)
            if self.own_keys:
                keys = keys + private_keys(r, len(keys), self.block_size)
            self._keys[r.request_id] = keys
        return keys

    def has_keys(self, r: Request) -> bool:
        """Whether `r`'s blocks have keys at all (content ids, or `own_keys`)."""
        return self.own_keys or bool(r.block_ids)

    def lookup_keys(self, r: Request) -> list[BlockKey]:
        """Keys of the full blocks among `r`'s known tokens (what admission looks up)."""
        if r.block_ids is None and self.own_keys and r.request_id not in self._keys:
            # private keys only: those admission looks at, not all of them
            return private_keys(r, 0, self.block_size, r.num_tokens // self.block_size)
        return self.keys(r)[: r.num_tokens // self.block_size]

    def lookup(self, blocks: BlockManager, r: Request) -> list[int]:
        """The cached blocks `r` would share if admitted now."""
        return blocks.find_cached_prefix(self.lookup_keys(r))

    def admit(self, blocks: BlockManager, r: Request) -> int:
        """Give `r` blocks for its known tokens, sharing its cached prefix; its cached tokens
        count as computed. Returns the cached tokens."""
        before = blocks.num_hit_blocks
        blocks.allocate(r.request_id, r.num_tokens, keys=self.lookup_keys(r))
        hits = blocks.num_hit_blocks - before
        tokens = min(hits * self.block_size, r.num_tokens - 1)
        r.num_computed_tokens = tokens
        r.num_cached_tokens += tokens
        if isinstance(blocks, TieredBlockManager):  # hits promoted from a lower tier
            host, remote = blocks.split_hit_tokens(tokens)
            r.num_host_hit_tokens += host
            r.num_remote_hit_tokens += remote
        return tokens

    def register(self, blocks: BlockManager, batch: list[Request]) -> None:
        """Cache the blocks of `batch` that became full and computed."""
        blocks.cache_computed(batch, self.registered_keys)

    def registered_keys(self, r: Request) -> list[BlockKey]:
        """The keys `register` caches `r`'s blocks under (none without ids or `own_keys`)."""
        return self.keys(r) if self.own_keys or r.block_ids else []

    def forget(self, r: Request) -> None:
        """`r` is finished: drop its keys."""
        self._keys.pop(r.request_id, None)


def private_keys(r: Request, start: int, block_size: int,
                 end: int | None = None) -> list[BlockKey]:
    """Keys of `r`'s full blocks from block `start` on (prompt and outputs; up to block `end`
    when given), unique to `r`: negative ints, where content keys (sim/memory/prefix_keys.py)
    are not."""
    end = r.max_tokens // block_size if end is None else end
    base = r.request_id << 32
    return [-1 - (base | j) for j in range(start, end)]


REAL_BACKEND_WHY = ("the real torch backend keeps its own KV per request (synthetic token ids "
                    "seeded by request id), so it cannot start a request from another's cached "
                    "blocks; use backend: sim")


PREFIX_ROUTERS = ("cache_aware",)  # routers that score instances by their cached prefixes


def check_causal_model(config: object, model_name: str, causal: bool, where: str = "") -> None:
    """ConfigError naming the model and the field when a policy config reuses prompt-prefix KV
    (`enable_prefix_caching`, or a router that scores cached prefixes) on a prefix-LM model
    (`ModelSpec.causal` false: GLM-1's bidirectional prompt), whose prefix KV depends on the
    rest of the prompt and so is never the same in two requests. `where` prefixes the field."""
    if causal:
        return
    why = (f"{model_name or 'the model'} is a prefix-LM (ModelSpec.causal = false: its prompt "
           f"attends bidirectionally, so a prefix's KV depends on the whole prompt and cannot "
           f"be reused across requests)")
    prefix = f"{where}." if where else ""
    if getattr(config, "enable_prefix_caching", False) is True:
        raise ConfigError(f"{prefix}enable_prefix_caching", True,
                          f"{why}; set enable_prefix_caching: false")
    router = getattr(config, "router", None)
    if router in PREFIX_ROUTERS:
        raise ConfigError(f"{prefix}router", router, f"{why}: no instance holds a reusable "
                          f"prefix for it to weigh; use least_loaded or session_affinity")


def check_cluster_model_causal(config: object, model: str, where: str) -> None:
    """`check_causal_model` for a config's `cluster.model` (a name or config path), at config
    load; a model that does not resolve is left to the cluster's own checks."""
    if getattr(config, "enable_prefix_caching", False) is not True \
            and getattr(config, "router", None) not in PREFIX_ROUTERS:
        return
    from sim.models.catalog import resolve_model  # lazy: a path reads its config.json
    try:
        spec = resolve_model(model)
    except ConfigError:
        return  # reported, by its own field, where the cluster is built
    check_causal_model(config, spec.name, spec.causal, where)


def check_prefix_caching_backend(config: object, backend: str, where: str) -> None:
    """ConfigError when a policy config enables prefix caching on the real backend."""
    if backend == "real" and getattr(config, "enable_prefix_caching", False):
        raise ConfigError(f"{where}.enable_prefix_caching", True, REAL_BACKEND_WHY)
