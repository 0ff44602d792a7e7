"""Routing an arriving request to one instance (for policies with per-instance queues).

A router sees the arriving request and one `InstanceLoad` per candidate instance (those whose KV
cache can ever hold the request) and names the instance to queue it on:

- `round_robin`: candidates in turn.
- `least_requests` (alias `least_loaded`): fewest outstanding (waiting + running) requests.
- `least_tokens`: fewest outstanding known tokens (prompt + outputs so far of every waiting and
  running request): queued prefill work and KV held, in tokens.
- `least_kv`: lowest KV load as a fraction of the instance's capacity, counting the prompts still
  waiting; the fair choice when instances differ in memory (heterogeneous GPUs).
- `cache_aware`: the instance scoring highest on PREFIX_WEIGHT x (fraction of the request's
  prompt already cached there) + LOAD_WEIGHT x (1 - its outstanding requests / the busiest
  candidate's + 1), as llm-d's prefix-cache and load scorers and SGLang's cache-aware router
  weigh them; instances without prefix caching score on load alone.
- `session_affinity`: consistent hashing of the request's `session_id` onto a ring of virtual
  nodes, so every turn of a conversation lands where its KV cache is (RTP-LLM); adding an
  instance moves only the sessions the new instance takes over. Requests without a session id,
  and sessions whose instance cannot hold the request, fall back to `least_requests` / the next
  instance on the ring.

Ties go to the lowest instance id. Routers are objects built per policy (no global state).
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Callable, Protocol, Sequence

from sim.core.request import Request
from sim.util.errors import ConfigError


class InstanceLoad:
    """What a router knows about one candidate instance when a request arrives.

    Token counts are summed over the queues only when a router asks for them.
    """

    __slots__ = ("instance_id", "waiting", "running", "reserved_kv_tokens", "kv_capacity_tokens",
                 "cached_tokens")

    def __init__(self, instance_id: int, waiting: Sequence[Request], running: Sequence[Request],
                 reserved_kv_tokens: int, kv_capacity_tokens: int,
                 cached_tokens: Callable[[Request], int] | None = None) -> None:
        self.instance_id = instance_id  # index of the instance in the cluster
        self.waiting = waiting  # requests routed there and not admitted yet
        self.running = running  # requests holding KV there
        self.reserved_kv_tokens = reserved_kv_tokens  # tokens of KV reserved or allocated
        self.kv_capacity_tokens = kv_capacity_tokens  # tokens
        # tokens of a request's prompt the instance holds in its prefix cache (None: no cache)
        self.cached_tokens = cached_tokens

    @property
    def num_requests(self) -> int:
        """Outstanding requests: waiting + running."""
        return len(self.waiting) + len(self.running)

    @property
    def num_tokens(self) -> int:
        """Outstanding known tokens (prompt + outputs so far) of waiting and running requests."""
        return sum(r.num_tokens for r in self.waiting) + sum(r.num_tokens for r in self.running)

    @property
    def kv_load(self) -> float:
        """Reserved KV plus waiting prompts, as a fraction of the KV capacity."""
        waiting = sum(r.num_tokens for r in self.waiting)
        return (self.reserved_kv_tokens + waiting) / self.kv_capacity_tokens


class Router(Protocol):
    def route(self, request: Request, candidates: Sequence[InstanceLoad]) -> int:
        """The chosen candidate's `instance_id` (candidates is never empty)."""
        ...


def _least(key: Callable[[InstanceLoad], float]) -> type:
    class LeastRouter:
        def route(self, request: Request, candidates: Sequence[InstanceLoad]) -> int:
            return min(candidates, key=lambda c: (key(c), c.instance_id)).instance_id

    return LeastRouter


LeastRequests = _least(lambda c: c.num_requests)
LeastTokens = _least(lambda c: c.num_tokens)
LeastKV = _least(lambda c: c.kv_load)


class CacheAware:
    """Longest cached prefix, weighed against load (module docstring)."""

    PREFIX_WEIGHT = 2.0  # weight of the cached fraction of the prompt (llm-d's default ratio)
    LOAD_WEIGHT = 1.0  # weight of the instance's spare share of outstanding requests

    def route(self, request: Request, candidates: Sequence[InstanceLoad]) -> int:
        busiest = max(c.num_requests for c in candidates) + 1
        prompt = max(request.num_prompt_tokens, 1)

        def score(c: InstanceLoad) -> float:
            cached = c.cached_tokens(request) if c.cached_tokens is not None else 0
            return (self.PREFIX_WEIGHT * min(cached, prompt) / prompt
                    + self.LOAD_WEIGHT * (1.0 - c.num_requests / busiest))

        return max(candidates, key=lambda c: (score(c), -c.instance_id)).instance_id


class RoundRobin:
    """Candidates in turn: the next instance id after the previous choice."""

    def __init__(self) -> None:
        self.last = -1  # instance id chosen last

    def route(self, request: Request, candidates: Sequence[InstanceLoad]) -> int:
        ids = sorted(c.instance_id for c in candidates)
        i = bisect.bisect_right(ids, self.last)
        self.last = ids[i % len(ids)]
        return self.last


def stable_hash(key: str) -> int:
    """A 64-bit hash that is the same in every process (unlike `hash(str)`)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class HashRing:
    """A consistent-hash ring with `num_vnodes` virtual nodes per instance."""

    def __init__(self, instance_ids: Sequence[int] = (), num_vnodes: int = 64) -> None:
        if num_vnodes < 1:
            raise ConfigError("num_vnodes", num_vnodes, "must be >= 1")
        self.num_vnodes = num_vnodes  # ring points per instance
        self._points: list[tuple[int, int]] = []  # sorted (hash, instance id)
        for i in instance_ids:
            self.add(i)

    @property
    def instance_ids(self) -> set[int]:
        return {i for _, i in self._points}

    def add(self, instance_id: int) -> None:
        """Put an instance's virtual nodes on the ring."""
        if instance_id in self.instance_ids:
            raise ValueError(f"instance {instance_id} is already on the ring")
        for v in range(self.num_vnodes):
            bisect.insort(self._points, (stable_hash(f"instance-{instance_id}-vnode-{v}"),
                                         instance_id))

    def remove(self, instance_id: int) -> None:
        """Take an instance's virtual nodes off the ring."""
        self._points = [p for p in self._points if p[1] != instance_id]

    def walk(self, key: str) -> list[int]:
        """Instance ids in ring order starting at `key`'s owner, each once."""
        if not self._points:
            raise ValueError("the hash ring has no instances")
        start = bisect.bisect_left(self._points, (stable_hash(key), -1))
        seen: list[int] = []
        n = len(self._points)
        for k in range(n):
            i = self._points[(start + k) % n][1]
            if i not in seen:
                seen.append(i)
        return seen

    def owner(self, key: str) -> int:
        """The instance that owns `key`."""
        return self.walk(key)[0]


class SessionAffinity:
    """Consistent hashing of `session_id`; least outstanding requests without one."""

    def __init__(self, num_instances: int, num_vnodes: int = 64) -> None:
        self.ring = HashRing(range(num_instances), num_vnodes)  # instance ids 0..n-1
        self.fallback = LeastRequests()

    def route(self, request: Request, candidates: Sequence[InstanceLoad]) -> int:
        if request.session_id is None:
            return self.fallback.route(request, candidates)
        allowed = {c.instance_id for c in candidates}
        for i in self.ring.walk(request.session_id):
            if i in allowed:
                return i
        return self.fallback.route(request, candidates)


ROUTERS: dict[str, Callable[[int], Router]] = {
    "round_robin": lambda n: RoundRobin(),
    "least_requests": lambda n: LeastRequests(),
    "least_loaded": lambda n: LeastRequests(),  # the name used before routers were objects
    "least_tokens": lambda n: LeastTokens(),
    "least_kv": lambda n: LeastKV(),
    "session_affinity": lambda n: SessionAffinity(n),
    "cache_aware": lambda n: CacheAware(),
}


def check_router(name: str) -> None:
    """ConfigError unless `name` is a known router."""
    if name not in ROUTERS:
        raise ConfigError("router", name, f"unknown router; known: {', '.join(ROUTERS)}")


def build_router(name: str, num_instances: int) -> Router:
    """A fresh router for a cluster of `num_instances` instances."""
    check_router(name)
    return ROUTERS[name](num_instances)
