"""Padded static batches, shared by every batch-level policy (vanilla, dynamic, Magnus).

A static batch pads every prompt to the batch's longest and decodes until its longest generation
ends; requests that finished early keep their slot, so their later iterations are wasted work.
The whole batch is one multi-iteration Step that no arrival interrupts.
"""

from __future__ import annotations

import numpy as np

from sim.core.executor import Step, StepResult
from sim.core.request import Request, RequestStatus
from sim.records.recorder import Recorder


def batch_kv_tokens(batch: list[Request]) -> int:
    """KV tokens a padded batch needs: size x (longest prompt + longest generation)."""
    longest_prompt = max(r.num_prompt_tokens for r in batch)
    longest_output = max(r.target_output_tokens for r in batch)
    return len(batch) * (longest_prompt + longest_output)


def static_tokens_per_request(longest_prompt: int, num_iterations: int) -> int:
    """Tokens a static batch computes per request (per slot) over `num_iterations` completed
    iterations: the padded prompt in the first, one token in each later one; nothing when the
    padded prefill itself did not complete (an OOM at iteration 1). The engine counts a step's
    computed tokens the same way (`sim/engine/simulation.py`), so per request computed = useful + padding +
    recomputed holds for completed, retried and failed batches alike."""
    return longest_prompt + num_iterations - 1 if num_iterations > 0 else 0


def static_step(instance_id: int, batch: list[Request], now: float) -> Step:
    """One Step running `batch` to completion: padded prefill, then lock-step decode."""
    longest_prompt = max(r.num_prompt_tokens for r in batch)
    longest_output = max(r.target_output_tokens for r in batch)
    n = len(batch)
    for r in batch:
        r.mark_scheduled(now, instance_id)
    return Step(instance_id, tuple(r.request_id for r in batch), (longest_prompt,) * n,
                (0,) * n, (True,) * n, num_iterations=longest_output, stop_on_arrival=False)


def finish_static_batch(batch: list[Request], result: StepResult, now: float,
                        recorder: Recorder) -> list[Request]:
    """Give each request its tokens from a completed static batch; return the finished ones."""
    start = now - result.duration_s
    times = start + result.iteration_ends_s
    longest_prompt = max(r.num_prompt_tokens for r in batch)
    num_iters = len(times)
    lengths = np.array([r.target_output_tokens for r in batch])
    if num_iters < int(lengths.max()):
        raise RuntimeError("a static batch was cut short without an OOM")
    if num_iters > 1:
        diffs = np.diff(times)
        # tokens produced at iteration j >= 2 by requests still generating then
        counts = np.searchsorted(np.sort(lengths), np.arange(2, num_iters + 1), side="left")
        recorder.gaps.add(diffs, weight=len(batch) - counts)
        prefix_max = np.maximum.accumulate(diffs)
    for r in batch:
        n = r.target_output_tokens
        r.emit(times[:n], recorder.gaps)
        if n > 1:
            r.max_itl_s = max(r.max_itl_s, float(prefix_max[n - 2]))
        useful = r.num_prompt_tokens + n - 1
        r.num_padding_tokens += static_tokens_per_request(longest_prompt, num_iters) - useful
    return [r for r in batch if r.status is RequestStatus.FINISHED]


def split_batch(batch: list[Request]) -> tuple[list[Request], list[Request]]:
    """Halves of a batch (Magnus' OOM recovery), keeping arrival order."""
    half = (len(batch) + 1) // 2
    return batch[:half], batch[half:]


def reset_for_retry(batch: list[Request], wasted_tokens_per_request: int) -> None:
    """Drop the KV of an OOM batch that will run again; its computed tokens count as
    recomputation (`static_tokens_per_request` of the failed step)."""
    for r in batch:
        r.num_recomputed_tokens += wasted_tokens_per_request
        r.num_computed_tokens = 0
        r.status = RequestStatus.WAITING


def fail_static_batch(batch: list[Request], wasted_tokens_per_request: int, now: float,
                      detail: str) -> None:
    """Give up the requests of an OOM batch (status failed, reason out_of_memory): the tokens
    their last attempt computed count as padding (earlier attempts are already recomputation)."""
    for r in batch:
        r.num_padding_tokens += wasted_tokens_per_request
        r.fail(now, detail)
