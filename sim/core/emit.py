"""Tokens landing for many requests at once: the end of a run of iterations (`emit_batch`, the
simulator's hot path) and a speculative verify (`emit_together`). Each updates the requests'
counters and timestamps and records the inter-token gaps; both return the requests that
finished.
"""

from __future__ import annotations

import numpy as np

from sim.core.request import GapRecorder, Request, RequestStatus


def emit_batch(requests: list[Request], start_s: float, ends_s: np.ndarray,
               gaps: GapRecorder) -> list[Request]:
    """Every request in `requests` caught up with its known tokens in the first iteration of a
    run that started at `start_s` (absolute seconds), then decoded one token per iteration; the
    iterations ended at `start_s + ends_s`. Returns the requests that finished. The run must not
    extend past any request's last token. This is the simulator's hot path: one pass, no calls."""
    n = len(ends_s)
    t_first = start_s + float(ends_s[0])
    t_last = start_s + float(ends_s[-1])
    if n > 1:
        inner = ends_s[1:] - ends_s[:-1]  # np.diff(ends_s)
        gaps.add(inner, weight=len(requests))
        longest = max(inner.tolist()) if n < 64 else float(inner.max())  # same value
    else:
        longest = 0.0
    first_gaps: list[float] = []
    finished: list[Request] = []
    finished_status = RequestStatus.FINISHED
    for r in requests:
        out = r.num_output_tokens
        if out == 0:
            r.first_token_s = t_first
            if longest > r.max_itl_s:
                r.max_itl_s = longest
        else:
            gap = t_first - r.last_token_s
            first_gaps.append(gap)
            if gap > longest:
                if gap > r.max_itl_s:
                    r.max_itl_s = gap
            elif longest > r.max_itl_s:
                r.max_itl_s = longest
        r.num_computed_tokens = r.num_prompt_tokens + out + n - 1
        out += n
        r.num_output_tokens = out
        r.last_token_s = t_last
        if out >= r.target_output_tokens:
            if out > r.target_output_tokens:
                raise RuntimeError(f"request {r.request_id} generated {out} tokens, "
                                   f"more than its {r.target_output_tokens}")
            r.status = finished_status
            r.finish_s = t_last
            finished.append(r)
    if first_gaps:
        gaps.add(first_gaps, 1)
    return finished


def emit_together(requests: list[Request], counts: list[int], time_s: float,
                  gaps: GapRecorder) -> list[Request]:
    """Each `requests[i]` caught up with its known tokens and sampled `counts[i]` tokens at once
    at `time_s` (a speculative verify: accepted drafts plus one). Its first new token records
    the gap since its previous token; the other `counts[i] - 1` record gaps of 0, so a request's
    gaps still sum to last - first token over outputs - 1 (mean ITL = TPOT). Returns the
    requests that finished."""
    finished: list[Request] = []
    first_gaps: list[float] = []
    for r, n in zip(requests, counts):
        if not 1 <= n <= r.num_remaining_output_tokens:
            raise RuntimeError(f"request {r.request_id}: {n} tokens emitted, "
                               f"{r.num_remaining_output_tokens} remain")
        if r.num_output_tokens == 0:
            r.first_token_s = time_s
        else:
            gap = time_s - r.last_token_s
            first_gaps.append(gap)
            r.max_itl_s = max(r.max_itl_s, gap)
        r.num_computed_tokens = r.num_tokens + n - 1
        r.num_output_tokens += n
        r.last_token_s = time_s
        if r.num_output_tokens == r.target_output_tokens:
            r.status = RequestStatus.FINISHED
            r.finish_s = time_s
            finished.append(r)
    if first_gaps:
        gaps.add(first_gaps, 1)
    zeros = sum(counts) - len(counts)
    if zeros:
        gaps.add(np.zeros(1), zeros)
    return finished
