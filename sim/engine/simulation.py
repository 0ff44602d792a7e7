"""The SimPy engine: an arrival process and one serve loop per model instance.

Each serve loop asks the policy for the next Step, has its executor run it, waits the step's
duration on the simulated clock, then hands the result back to the policy. A Step that may be
interrupted (`stop_on_arrival`) is cut at the first iteration boundary after the next arrival, so
jumping over runs of decode iterations is exact: the policy sees every arrival at the same
iteration boundary as it would iterating one step at a time.

With a `SchedulingOverhead` (sim/cost/overhead.py) each iteration also pays modelled scheduler CPU
time, serialized with the GPU or overlapped with the previous iteration (async); the step is then
run untruncated and cut on the overhead-adjusted clock, so the jumps stay exact. The policy's own
host time (next_step + update, `time.perf_counter`) is measured for every step either way.

With `max_concurrency` N the arrival process is a closed loop, as `vllm bench serve
--max-concurrency` (a semaphore in the client): a request is sent at its trace time or, when N
requests are in the system, as soon as one of them finishes, and its `arrival_s` becomes that
send time (latencies count from it, as the client measures them). While a request waits for a
slot, steps run one iteration at a time, so a release is seen at the same iteration boundary as
when iterating one step at a time. Without it the open-loop arrival process is unchanged.

With request classes (docs/classes.md), an `AdmissionControl` (sim/engine/admission.py) may reject an
arrival before the policy sees it, and a workload with client timeouts gets a `Timeouts`
(sim/engine/timeouts.py): a process cancelling requests at their deadlines, which also cut steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from time import perf_counter
from typing import Callable, Sequence

import simpy

from sim.core.executor import Executor, bad_step_time
from sim.core.request import Request, RequestStatus
from sim.cost.overhead import OverheadClock, SchedulingOverhead
from sim.engine.admission import AdmissionControl
from sim.engine.gc_pace import paced_gc
from sim.engine.policy import Policy
from sim.engine.request_source import RequestSource, as_source
from sim.engine.timeouts import Timeouts
from sim.engine.verdict import SloWatch
from sim.records.instance_stats import InstanceStats
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError


class SimulationStuck(RuntimeError):
    """The policy left requests unfinished with no work scheduled and no arrivals to come."""


@dataclass
class _State:
    total: int  # requests in the workload
    num_done: int = 0  # requests in a final state
    next_arrival_s: float = math.inf  # absolute time of the next arrival
    arrivals_done: bool = False
    idle: dict[int, simpy.Event] = field(default_factory=dict)  # instance -> wake-up event
    on_done: Callable[[int], None] | None = None  # progress callback
    num_sent: int = 0  # requests released by a closed-loop arrival process
    slot: simpy.Event | None = None  # closed loop: succeeds when a request leaves the system
    live: dict[int, Request] = field(default_factory=dict)  # admitted, not yet final, by id
    timeouts: Timeouts | None = None  # client timeouts, when the workload has any

    def done(self, n: int) -> None:
        self.num_done += n
        if self.on_done is not None and n:
            self.on_done(n)
        if self.slot is not None and n:
            slot, self.slot = self.slot, None
            slot.succeed()

    def wake_all(self) -> None:
        idle, self.idle = self.idle, {}
        for ev in idle.values():
            ev.succeed()


@dataclass
class Simulation:
    """One run: a workload, a policy, and one executor per instance."""

    requests: Sequence[Request] | RequestSource  # sorted by arrival_s (a source: built lazily)
    policy: Policy
    executors: Sequence[Executor]
    recorder: Recorder
    on_done: Callable[[int], None] | None = None  # called with the number of newly done requests
    overhead: SchedulingOverhead | None = None  # modelled scheduler CPU time per iteration
    max_model_len: int | None = None  # tokens; longer prompts rejected, outputs cut (None: no cap)
    max_concurrency: int | None = None  # requests in the system at once (closed loop); None: open
    admission: AdmissionControl | None = None  # rejects arrivals over its limits; None: admit all
    watch: SloWatch | None = None  # stops the run once its SLO verdict is certain (verdict.py)
    env: simpy.Environment = field(default_factory=simpy.Environment)

    def run(self) -> list[InstanceStats]:
        """Simulate until every request is finished, rejected or failed."""
        source = as_source(self.requests)
        state = _State(total=len(source), on_done=self.on_done)
        stats = [InstanceStats(i, ex.kv_capacity_tokens) for i, ex in enumerate(self.executors)]
        if source.has_timeouts:
            state.timeouts = self._timeouts(state)
            self.env.process(state.timeouts.process())
        self.env.process(self._arrivals(source, state, self.max_concurrency))
        if self.watch is not None:  # stops the run once its SLO verdict is certain
            self.env.process(self.watch.process(self.env, state.live,
                                                lambda: state.num_done < state.total))
        for i, ex in enumerate(self.executors):
            bind = getattr(ex, "bind_clock", None)  # executors sharing stages in time
            if bind is not None:  # (sim/cluster/pipeline.py) read the simulated clock
                bind(self.env)
            self.env.process(self._serve(i, ex, stats[i], state))
        with paced_gc():  # fewer young-generation sweeps (sim/engine/gc_pace.py)
            self.env.run()
        if state.num_done < state.total:
            stuck = [i for i, r in state.live.items() if not r.is_finished][:10]
            raise SimulationStuck(
                f"policy {self.policy.name!r} left {state.total - state.num_done} requests "
                f"unfinished with nothing scheduled (first ids: {stuck})")
        return stats

    def _arrivals(self, source: RequestSource, state: _State, limit: int | None = None):
        """Each request at its trace time; with `limit` (closed loop) also only when fewer than
        `limit` are in the system, its arrival then being the time it is sent. Requests are
        taken from `source` one at a time, when their time comes."""
        env, records, n = self.env, self.recorder.records, len(source)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise ValueError(f"max_concurrency={limit!r}: must be an int >= 1")
        for i in range(n):
            r = source.request(i)
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            if limit is not None:
                while state.num_sent - state.num_done >= limit:
                    state.next_arrival_s = env.now  # a release may come at any step end
                    state.slot = env.event()
                    yield state.slot
                r.arrival_s = env.now
                state.num_sent += 1
            state.next_arrival_s = source.arrival_s(i + 1) if i + 1 < n else math.inf
            if self._admit(r, env.now):
                state.live[r.request_id] = r
                if state.timeouts is not None:
                    state.timeouts.add(r)
            else:
                if records is not None:
                    records.add((r,))
                state.done(1)
            if state.idle:
                state.wake_all()
        state.arrivals_done = True
        self.policy.drain(env.now)
        state.wake_all()

    def _admit(self, r: Request, now: float) -> bool:
        """Apply the context limit, then hand the request to the policy; False when rejected.
        Every rejection and every cut output is an event (kind, request id, reason: detail)."""
        ok = self.max_model_len is None or r.apply_max_model_len(self.max_model_len, now)
        cut = f"{r.reason}: {r.reason_detail}" if ok and r.reason else ""  # output cut
        admission = self.admission
        ok = ok and (admission is None or admission.check(r, now))
        ok = ok and self.policy.add_request(r, now)
        if ok and admission is not None:
            admission.admitted(r)
        if not ok:
            if cut:  # cut, then turned away: both events (the rejection overwrote the reason)
                self.recorder.event(now, "cut", r.request_id, cut)
            self.recorder.event(now, "rejected", r.request_id, f"{r.reason}: {r.reason_detail}")
        elif r.reason:
            self.recorder.event(now, "cut", r.request_id, f"{r.reason}: {r.reason_detail}")
        return ok

    def _timeouts(self, state: _State) -> Timeouts:
        """The run's client timeouts; ConfigError when the policy cannot cancel requests."""
        if not self.policy.supports_cancel:
            raise ConfigError("policy", self.policy.name, "cannot cancel a request whose client "
                              "gave up, and the workload has timeout_s: client timeouts run "
                              "with vllm, vllm_v0, sarathi and orca")

        return Timeouts(self.env, self.policy, lambda cancelled, now: self._retire(
            state, cancelled, now))

    def _retire(self, state: _State, done: list[Request], now: float) -> None:
        """Requests that reached a final state at `now` leave the system: recorded (an event
        for each that did not finish), counted, and idle instances woken."""
        rec, live = self.recorder, state.live
        for r in done:
            live.pop(r.request_id, None)
            if r.status is not RequestStatus.FINISHED:  # failed, rejected or cancelled
                rec.event(now, r.status.value, r.request_id, f"{r.reason}: {r.reason_detail}")
        if done:
            if self.watch is not None:
                self.watch.on_final(done, now)
            if rec.records is not None:
                rec.records.add(done)
            state.done(len(done))
        if state.idle:
            state.wake_all()

    def _sleep(self, instance_id: int, state: _State):
        """Idle until an arrival or a step end wakes the instance, or the policy's wake-up time."""
        env = self.env
        wake = state.idle[instance_id] = env.event()
        at = self.policy.next_wakeup_s(instance_id, env.now)
        if at == math.inf:
            yield wake
            return
        if not at > env.now:
            raise RuntimeError(f"policy {self.policy.name!r} asked to be woken at {at!r} s, "
                               f"not after now={env.now!r} s")
        yield wake | env.timeout(at - env.now)
        if state.idle.get(instance_id) is wake:
            del state.idle[instance_id]

    def _serve(self, instance_id: int, executor: Executor, st: InstanceStats, state: _State):
        env, policy, rec = self.env, self.policy, self.recorder
        ov = self.overhead
        clock = None if ov is None or ov.is_zero else OverheadClock(ov)
        sched = gap = 0.0  # modelled scheduler seconds of a step, and the GPU-idle part
        timeouts = state.timeouts
        now = env.now
        while True:
            t0 = perf_counter()
            step = policy.next_step(instance_id, now)
            host = perf_counter() - t0
            if step is None:
                st.policy_host_s += host
                if state.arrivals_done and state.num_done >= state.total:
                    return
                if clock is not None:
                    clock.idle()
                yield from self._sleep(instance_id, state)
                now = env.now
                continue
            if timeouts is None:
                until = state.next_arrival_s - now if step.stop_on_arrival else math.inf
            else:  # also cut at the next client deadline
                until = timeouts.until(instance_id, step, state.next_arrival_s, now)
            if clock is None:
                result = executor.execute(step, until)
            else:
                result, sched, gap = clock.run(executor, step, until)
            if not 0.0 <= result.duration_s < math.inf:  # NaN, inf or < 0: never a time
                raise bad_step_time(executor, step, result)
            start = now
            reserved = policy.num_reserved_kv_tokens(instance_id)
            yield env.timeout(result.duration_s)
            now = env.now
            m = len(result.iteration_ends_s)
            first, ctx = sum(step.num_new_tokens), sum(step.num_context_tokens)
            seqs = len(step.request_ids)
            computed = first + (m - 1) * seqs if m else 0  # tokens over completed iterations
            kv = ctx + computed - step.num_shared_kv_tokens if m else 0  # kv_tokens_after(m)
            wall = now - start
            st.busy_s += wall
            st.gpu_busy_s += wall - gap
            st.sched_s += sched
            st.num_steps += 1
            st.num_iterations += m
            st.seq_iterations += m * seqs
            if kv > st.peak_kv_tokens:
                st.peak_kv_tokens = kv
            if reserved > st.peak_reserved_kv_tokens:
                st.peak_reserved_kv_tokens = reserved
            t0 = perf_counter()
            done = policy.update(step, result, now)
            host += perf_counter() - t0
            st.policy_host_s += host
            rec.record_step(instance_id, start, wall, m, seqs, first, ctx, computed, kv, reserved,
                            result.oom, sched, gap, host)
            if timeouts is not None:  # requests whose clients gave up: cancelled now
                done = timeouts.after_step(instance_id, done, env.now)
            if done or state.idle:
                self._retire(state, done, now)
