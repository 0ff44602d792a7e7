"""Priority scheduling for the paged policies: `scheduling_policy: priority`, as vLLM V1 has it.

vLLM's `--scheduling-policy priority` (vllm/v1/core/sched/scheduler.py, request_queue.py): the
waiting queue is ordered by (priority, arrival), lower first, and a preempted request goes back
into it by that order; when a running request's blocks run short, the running request with the
worst (priority, arrival) is preempted, not simply the last admitted, even one already given
tokens in this step (they go back to the budget). `vllm_v0` and `sarathi` take the same two
rules: their waiting queue, and the victim when a decode's blocks run short.

Aging (`priority_aging_s` = A seconds): a waiting request's effective priority improves by one
level per A seconds waited, p - (t - arrival) / A at time t. Between any two requests that order
is the order of arrival + p * A at every t, so the queue is ordered by (arrival + p * A,
arrival) and the victim is the running request with the largest such key. Either way the order
changes only at arrivals and preemptions, so jumps over decode runs stay exact.

Starvation bound: with aging, request r of priority p is admitted before, and never preempted
in favour of, any request x of priority q that arrived (p - q) * A seconds or more after it; so
no request waits behind one that arrived (p - p_min) * A seconds or more after it (p_min: the
best priority of the workload). It waits at most what a FCFS request arriving (p - p_min) * A
later would wait. Without aging the order is vLLM's, and a low priority may starve.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Callable, Iterator

from sim.core.request import Request, RequestStatus
from sim.util.errors import ConfigError

from policies.paged_decode import DecodeBatch

SCHEDULING_POLICIES = ("fcfs", "priority")  # vLLM's SchedulerConfig.policy values
Key = tuple[float, float, int]  # sort key of a request: smaller is served first


def check_scheduling(policy: object, aging_s: object) -> None:
    """ConfigError for an unknown scheduling policy or a bad aging period."""
    if policy not in SCHEDULING_POLICIES:
        raise ConfigError("scheduling_policy", policy,
                          f"unknown; known: {', '.join(SCHEDULING_POLICIES)}")
    if aging_s is None:
        return
    if isinstance(aging_s, bool) or not isinstance(aging_s, (int, float)) or \
            not 0 < aging_s < math.inf:
        raise ConfigError("priority_aging_s", aging_s, "must be a number of seconds > 0 "
                          "(or null: no aging)")
    if policy != "priority":
        raise ConfigError("priority_aging_s", aging_s, "only with scheduling_policy: priority")


def priority_key(aging_s: float | None) -> Callable[[Request], Key]:
    """The order of requests: (priority, arrival, id), or with aging (arrival + priority x
    aging_s, arrival, id)."""
    if aging_s is None:
        return lambda r: (r.priority, r.arrival_s, r.request_id)
    return lambda r: (r.arrival_s + r.priority * aging_s, r.arrival_s, r.request_id)


class PriorityWaiting:
    """A waiting queue in priority order with the deque methods the paged policies use:
    `[0]` is the head (the best key), `append` and `appendleft` both insert by key (vLLM's
    priority queue prepends by order too), `popleft` takes the head."""

    __slots__ = ("_heap", "_key")

    def __init__(self, key: Callable[[Request], Key]) -> None:
        self._heap: list[tuple[Key, Request]] = []  # heap of (key, request); keys are unique
        self._key = key

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (r for _, r in self._heap)

    def __contains__(self, request: object) -> bool:
        return any(r is request for _, r in self._heap)

    def __getitem__(self, index: int) -> Request:
        if index != 0:
            raise IndexError("a priority queue gives its head ([0]) only")
        return self._heap[0][1]

    def append(self, request: Request) -> None:
        heapq.heappush(self._heap, (self._key(request), request))

    appendleft = append

    def popleft(self) -> Request:
        return heapq.heappop(self._heap)[1]

    def remove(self, request: Request) -> None:
        """Take `request` out (a cancelled request); ValueError when it is not here."""
        for i, (_, r) in enumerate(self._heap):
            if r is request:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return
        raise ValueError(f"request {request.request_id} is not waiting here")


class PriorityScheduling:
    """Mixed in before a paged policy class by `priority_variant`: the waiting queues become
    PriorityWaiting, and preemption takes the worst key. `grow_decodes` serves `vllm_v0` and
    `sarathi`, `schedule_running` serves `vllm` (V1)."""

    state: list[Any]
    config: Any
    decode_width: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self.priority_key = priority_key(self.config.priority_aging_s)
        for s in self.state:
            s.waiting = PriorityWaiting(self.priority_key)
        self.preempted_in: Any = None  # the instance whose decodes just preempted (grow_decodes)

    def victim(self, s: Any) -> Request:
        """The running request to preempt: the worst key."""
        return max(s.running, key=self.priority_key)

    def grow_priority(self, s: Any, r: Request, num_new_tokens: int, now: float,
                      on_preempt: Callable[[Request], None]) -> bool:
        """Slots for `r`'s next tokens, preempting the worst running requests while blocks are
        short (each passed to `on_preempt`); False when `r` itself was."""
        held = s.blocks.num_tokens(r.request_id)
        extra = max(0, r.num_computed_tokens + num_new_tokens - held)
        while s.blocks.blocks_to_append(r.request_id, extra) > s.blocks.num_free_blocks:
            victim = self.victim(s)
            on_preempt(victim)
            self.preempt(s, victim, now)  # type: ignore[attr-defined]
            if victim is r:
                return False
        s.blocks.append(r.request_id, extra)
        return True

    def grow_decode_batch(self, s: Any, now: float) -> DecodeBatch:
        """One slot for every running request whose prefill is done, in admission order,
        preempting the worst keys while blocks are short (`vllm_v0`, `sarathi`)."""
        w = self.decode_width
        self.preempted_in = None
        ready = [r for r in s.running if r.num_computed_tokens and r.num_new_tokens == 1]
        grow_to = getattr(s.blocks, "grow_to", None)
        if grow_to is not None and grow_to([r.request_id for r in ready],
                                           [r.num_computed_tokens + w for r in ready]):
            return DecodeBatch(ready)
        decodes: list[Request] = []

        def drop(victim: Request) -> None:
            self.preempted_in = s
            if victim in decodes:
                decodes.remove(victim)

        for r in ready:
            if r.status is not RequestStatus.RUNNING:
                continue  # preempted for an earlier request's slot
            if self.grow_priority(s, r, w, now, drop):  # else r was the worst: the rest go on
                decodes.append(r)
        return DecodeBatch(decodes)

    def decode_step(self, s: Any, instance_id: int, batch: list[Request],
                    ids: list[int] | None = None, held: list[int] | None = None) -> Any:
        """One iteration after decodes preempted, else the paged policy's jump: the freed
        blocks may fit the head waiting request at the next iteration (under FCFS the head is
        the victim itself, which does not fit), so a jump could not stay exact."""
        if self.preempted_in is s and self.spec is None:  # type: ignore[attr-defined]
            self.preempted_in = None
            return self.make_step(s, instance_id, batch,  # type: ignore[attr-defined]
                                  [1] * len(batch), 1, len(batch))
        self.preempted_in = None
        return super().decode_step(s, instance_id, batch, ids, held)  # type: ignore[misc]

    def schedule_running(self, s: Any, plan: Any, now: float) -> None:
        """vLLM V1's running loop under the priority policy (`vllm`): as VllmV1Policy's, but a
        victim already scheduled in this step leaves the plan and gives its tokens back. When a
        request preempted itself before anything was scheduled, vLLM's step is empty and its
        next `schedule()` call, at once, starts over (admitting too): so does this loop."""
        while True:
            self.schedule_running_once(s, plan, now)
            if plan.decodes or plan.prefills or not plan.preempted:
                return
            plan.preempted = False  # the empty step preempted; the next one starts clean
            if not s.running:
                return

    def schedule_running_once(self, s: Any, plan: Any, now: float) -> None:
        """One pass of the running loop (`schedule_running`)."""
        i = 0
        while i < len(s.running) and plan.budget > 0:
            r = s.running[i]
            if self.is_loading(r):  # type: ignore[attr-defined]
                i += 1
                continue  # its offloaded blocks are still loading (policies/vllm_offload.py)
            decode = r.num_new_tokens == 1 and r.num_computed_tokens > 0
            n = self.decode_width if decode else self.chunk(r.num_new_tokens,  # type: ignore
                                                            plan.budget)
            if n > plan.budget:
                break

            def unplan(victim: Request) -> None:
                nonlocal i
                plan.preempted = True  # V1 admits nothing in a step that preempted
                if s.running.index(victim) < i:  # given tokens in this step already
                    _unschedule(plan, victim, self.decode_width)
                    i -= 1

            if not self.grow_priority(s, r, n, now, unplan):
                break  # r preempted itself: every other running request is better
            plan.schedule(r, n, decode)
            i += 1


def _unschedule(plan: Any, victim: Request, decode_width: int) -> None:
    """Take a preempted request out of a step's plan, its tokens back to the budget."""
    if victim in plan.decodes:
        plan.decodes.remove(victim)
        plan.budget += decode_width
        return
    k = plan.prefills.index(victim)
    plan.budget += plan.chunks[k]
    del plan.prefills[k], plan.chunks[k]


def priority_variant(cls: type) -> type:
    """`cls` with PriorityScheduling mixed in before it (the class a policy whose config says
    `scheduling_policy: priority` is built as)."""
    if issubclass(cls, PriorityScheduling):
        return cls
    return type(f"Priority{cls.__name__}", (PriorityScheduling, cls), {})
