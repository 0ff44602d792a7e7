"""A request and the counters a scheduler needs.

Following vLLM v1: a request's known tokens are its prompt plus the outputs sampled so far;
each step computes new tokens until `num_computed_tokens` catches up with `num_tokens`, at which
point a token is sampled. A request with P prompt tokens and N outputs computes P + N - 1 tokens
(the last sampled token is never fed back).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

NAN = math.nan
MAX_ARRIVAL_S = 1e9  # seconds: beyond, float64 arrival times lose sub-microsecond resolution


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # arrived, not yet finished
    RUNNING = "running"  # holds KV on an instance
    FINISHED = "finished"  # generated all its output tokens
    REJECTED = "rejected"  # can never be served (e.g. prompt larger than KV memory)
    FAILED = "failed"  # its batch ran out of memory and the policy gave it up
    CANCELLED = "cancelled"  # its client gave up (timeout) while it was queued or running


# Why a request did not run as its trace asked: `Request.reason` holds one of these codes (its
# `reason_detail` the values), and every table counts requests per code.
PROMPT_TOO_LONG = "prompt_too_long"  # prompt_tokens > max_model_len: rejected (vLLM does)
LENGTH_CAPPED = "max_model_len"  # prompt + output > max_model_len: output cut (finish "length")
EXCEEDS_KV = "exceeds_kv_capacity"  # needs more KV than any instance has: rejected
EXCEEDS_BATCH_TOKENS = "exceeds_max_num_batched_tokens"  # prompt over a step's token budget
EXCEEDS_MAX_TOKENS = "exceeds_max_tokens"  # output over a policy's max_tokens reservation
OUT_OF_MEMORY = "out_of_memory"  # ran out of KV memory while running: failed
ADMISSION_RATE = "admission_rate"  # over its token bucket's rate (sim/engine/admission.py): rejected
QUEUE_FULL = "queue_full"  # too many requests waiting (sim/engine/admission.py): rejected
PREDICTED_WAIT = "predicted_wait"  # predicted wait over its limit (sim/engine/admission.py): rejected
CLIENT_TIMEOUT = "client_timeout"  # its client gave up timeout_s after arrival: cancelled

# The optional per-request class columns of a trace (traces/schema.py) and the Request fields
# they fill; records carry a column only when the run's workload has it (sim/records/record_log.py).
CLASS_FIELDS: tuple[tuple[str, str], ...] = (("class", "request_class"), ("priority", "priority"),
                                             ("timeout_s", "timeout_s"))
FINAL_STATUSES = (RequestStatus.FINISHED, RequestStatus.REJECTED, RequestStatus.FAILED,
                  RequestStatus.CANCELLED)


class GapRecorder(Protocol):
    """Receives inter-token gaps (seconds), each with a count of tokens that saw it."""

    def add(self, gaps: np.ndarray | list[float] | float, weight: int = 1) -> None: ...


@dataclass(eq=False, slots=True)
class Request:
    request_id: int  # id assigned by the simulation (row order of the trace)
    arrival_s: float  # seconds since the start of the trace
    num_prompt_tokens: int  # tokens
    target_output_tokens: int  # tokens the request generates (trace's, cut at max_model_len)
    text: str | None = None  # prompt text, when the workload has it
    app: str | None = None  # application / task name
    session_id: str | None = None  # conversation id for multi-turn workloads
    block_ids: tuple[int, ...] | None = None  # prompt block hashes (prefix sharing)
    block_tokens: int | None = None  # tokens each block id covers (sim/memory/prefix_keys.py)
    # scheduler counters
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV exists (real tokens, padding excluded)
    num_output_tokens: int = 0  # tokens sampled so far
    instance_id: int = -1  # instance that served (or serves) it
    num_preemptions: int = 0  # times its KV was dropped
    num_recomputed_tokens: int = 0  # tokens computed again after preemptions
    num_padding_tokens: int = 0  # padding / wasted-slot tokens computed on its behalf
    num_cached_tokens: int = 0  # tokens whose KV a prefix-cache hit supplied (every admission)
    predicted_output_tokens: float = NAN  # a length predictor's estimate, when a policy uses one
    # timestamps, seconds since trace start
    scheduled_s: float = NAN  # first time it was part of a step
    first_token_s: float = NAN  # first output token
    last_token_s: float = NAN  # latest output token
    finish_s: float = NAN  # last output token (or rejection / failure time)
    max_itl_s: float = 0.0  # largest gap between two of its output tokens
    # speculative decoding (policies/speculative.py)
    num_spec_steps: int = 0  # verify steps it took part in
    num_draft_tokens: int = 0  # tokens a draft model proposed for it
    num_accepted_tokens: int = 0  # proposed tokens the target accepted
    extra: dict[str, object] = field(default_factory=dict)  # policy-specific annotations
    requested_output_tokens: int = 0  # tokens the trace asked for (0: target_output_tokens)
    reason: str = ""  # code of why it was rejected, failed or cut ("" when it ran as asked)
    reason_detail: str = ""  # the reason with its values, for people
    # KV memory tiers (policies/kv_tiers.py; record columns only in runs that turn them on)
    num_swapped_out_tokens: int = 0  # KV tokens copied to host memory by swap preemptions
    num_swapped_in_tokens: int = 0  # KV tokens copied back from host memory
    num_host_hit_tokens: int = 0  # of num_cached_tokens, those the host prefix tier supplied
    num_remote_hit_tokens: int = 0  # of num_cached_tokens, those the remote tier supplied
    # request classes (docs/classes.md): all unset unless the workload has them
    request_class: str | None = None  # the workload's class name (trace column `class`)
    priority: int = 0  # scheduling priority: lower is more important (as vLLM's priority)
    timeout_s: float = math.inf  # seconds after arrival at which its client gives up
    # multi-LoRA (policies/lora.py; record columns only in runs that turn it on)
    lora_id: int = -1  # the LoRA adapter it runs with (trace column `lora_id`); -1: none
    num_lora_waits: int = 0  # times admission passed it over: its adapter had no free slot

    def __post_init__(self) -> None:
        if self.num_prompt_tokens < 1:
            raise ValueError(f"request {self.request_id}: num_prompt_tokens="
                             f"{self.num_prompt_tokens} must be >= 1")
        if self.target_output_tokens < 1:
            raise ValueError(f"request {self.request_id}: target_output_tokens="
                             f"{self.target_output_tokens} must be >= 1")
        if self.requested_output_tokens == 0:
            self.requested_output_tokens = self.target_output_tokens
        if not self.timeout_s > 0:
            raise ValueError(f"request {self.request_id}: timeout_s={self.timeout_s!r} must be "
                             f"> 0 seconds (inf: none)")

    # ---- derived counters -------------------------------------------------------------
    @property
    def num_tokens(self) -> int:
        """Known tokens: prompt plus sampled outputs."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_new_tokens(self) -> int:
        """Tokens still to compute before the next sample."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def num_remaining_output_tokens(self) -> int:
        return self.target_output_tokens - self.num_output_tokens

    @property
    def max_tokens(self) -> int:
        """KV tokens the request holds at its largest (prompt + output - 1, rounded up by one)."""
        return self.num_prompt_tokens + self.target_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def deadline_s(self) -> float:
        """When its client gives up (seconds since trace start; inf: never)."""
        return self.arrival_s + self.timeout_s

    # ---- state changes ------------------------------------------------------------------
    def mark_scheduled(self, now: float, instance_id: int) -> None:
        """Record the first time the request enters a step."""
        if self.scheduled_s != self.scheduled_s:  # NaN
            self.scheduled_s = now
        self.instance_id = instance_id
        self.status = RequestStatus.RUNNING

    def compute(self, num_tokens: int) -> None:
        """Advance computed tokens by a (partial prefill) chunk that samples nothing."""
        self.num_computed_tokens += num_tokens

    def emit(self, token_times: np.ndarray, gaps: GapRecorder) -> None:
        """The request computed up to its known tokens and sampled one token at each time in
        `token_times` (one per iteration of a run: the first after the catching-up chunk, then one
        per decode iteration). Gaps between tokens go to `gaps`; the shared gaps inside the run
        are recorded by the caller once for the whole batch (see `emit_batch`)."""
        n = len(token_times)
        if n > self.num_remaining_output_tokens:
            raise RuntimeError(f"request {self.request_id}: {n} tokens emitted, only "
                               f"{self.num_remaining_output_tokens} remain")
        self.num_computed_tokens = self.num_tokens + n - 1
        first = float(token_times[0])
        if self.num_output_tokens == 0:
            self.first_token_s = first
        else:
            gap = first - self.last_token_s
            gaps.add(gap)
            if gap > self.max_itl_s:
                self.max_itl_s = gap
        self.num_output_tokens += n
        self.last_token_s = float(token_times[-1])
        if self.num_output_tokens >= self.target_output_tokens:
            self.status = RequestStatus.FINISHED
            self.finish_s = self.last_token_s

    def preempt(self) -> None:
        """Drop the request's KV (recomputation): its known tokens are computed again later."""
        self.num_recomputed_tokens += self.num_computed_tokens
        self.num_computed_tokens = 0
        self.num_preemptions += 1
        self.status = RequestStatus.WAITING

    def reject(self, now: float, detail: str, code: str = EXCEEDS_KV) -> None:
        """It can never be served: final, with a reason `code` and its `detail`."""
        self._end(RequestStatus.REJECTED, now, code, detail)

    def fail(self, now: float, detail: str, code: str = OUT_OF_MEMORY) -> None:
        """It was given up while running: final, with a reason `code` and its `detail`."""
        self._end(RequestStatus.FAILED, now, code, detail)

    def cancel(self, now: float, detail: str, code: str = CLIENT_TIMEOUT) -> None:
        """Its client gave up while it was queued or between steps: final, with a reason
        `code` and its `detail`. The tokens it computed in this attempt were wasted work: they
        count as padding, as a failed request's do (docs/architecture.md, "Time and tokens")."""
        self.num_padding_tokens += self.num_computed_tokens
        self._end(RequestStatus.CANCELLED, now, code, detail)

    def _end(self, status: RequestStatus, now: float, code: str, detail: str) -> None:
        """Final at `now` with `status` and why (reason code and detail)."""
        self.status = status
        self.finish_s = now
        self.reason, self.reason_detail = code, detail

    def apply_max_model_len(self, max_model_len: int, now: float) -> bool:
        """Enforce the model's context as vLLM does: reject a prompt longer than it (returns
        False), else stop generation when prompt + outputs reach it (finish reason `length`;
        a prompt of exactly `max_model_len` tokens still samples one token)."""
        prompt = self.num_prompt_tokens
        if prompt > max_model_len:
            self.reject(now, f"prompt_tokens={prompt} > max_model_len={max_model_len}",
                        PROMPT_TOO_LONG)
            return False
        allowed = max(1, max_model_len - prompt)
        if self.target_output_tokens > allowed:
            self.reason, self.reason_detail = LENGTH_CAPPED, (
                f"prompt_tokens={prompt} + output_tokens={self.target_output_tokens} > "
                f"max_model_len={max_model_len}: output cut to {allowed}")
            self.target_output_tokens = allowed
        return True

    @property
    def finish_reason(self) -> str:
        """vLLM's finish reason once final: stop | length (cut at max_model_len) | rejected |
        failed | cancelled; "" while it runs."""
        if self.status is RequestStatus.FINISHED:
            return "length" if self.target_output_tokens < self.requested_output_tokens else "stop"
        if self.status in FINAL_STATUSES:
            return self.status.value
        return ""
