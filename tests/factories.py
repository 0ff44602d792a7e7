"""Test factories: requests, traces and a linear-cost executor with analytic step times."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.core.executor import Step, StepResult, truncate_ends


@dataclass
class LinearExecutor:
    """Step time = base_s + per_token_s * computed tokens + per_ctx_s * context tokens."""

    capacity: int = 10_000  # KV tokens
    base_s: float = 0.01  # seconds per iteration
    per_token_s: float = 1e-4  # seconds per computed token
    per_ctx_s: float = 0.0  # seconds per context token read
    name: str = "linear"
    draft_s: float | None = None  # seconds per draft iteration (speculation); None: no draft

    @property
    def has_draft(self) -> bool:
        return self.draft_s is not None

    @property
    def kv_capacity_tokens(self) -> int:
        return self.capacity

    def iteration_times(self, step: Step) -> np.ndarray:
        n, b = step.num_iterations, step.num_seqs
        first_ctx = sum(step.num_context_tokens)
        tokens = np.full(n, b, dtype=np.float64)
        tokens[0] = step.num_first_tokens
        ctx = np.empty(n)
        ctx[0] = first_ctx
        if n > 1:
            ctx[1:] = first_ctx + step.num_first_tokens + b * np.arange(n - 1)
        times = self.base_s + self.per_token_s * tokens + self.per_ctx_s * ctx
        times[0] += (self.draft_s or 0.0) * step.num_draft_tokens  # k draft iterations first
        return times

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        times = self.iteration_times(step)
        ends = np.cumsum(times)
        over = [i for i in range(1, step.num_iterations + 1)
                if step.kv_tokens_after(i) > self.capacity]
        if over:
            i = over[0]
            return StepResult(float(ends[i - 1]), ends[: i - 1], oom=True)
        ends = truncate_ends(ends, until_s)
        return StepResult(float(ends[-1]), ends)


def make_trace(rows: list[tuple[float, int, int]]) -> pd.DataFrame:
    """A trace from (arrival_s, prompt_tokens, output_tokens) rows."""
    return pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens"])


def random_trace(rng: np.random.Generator, n: int, rate: float = 5.0,
                 max_prompt: int = 200, max_output: int = 50,
                 block_tokens: int | None = None) -> pd.DataFrame:
    """A small random trace for property tests; with `block_tokens`, with block ids too."""
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    df = make_trace([(float(a), int(p), int(o)) for a, p, o in zip(
        arrivals, rng.integers(1, max_prompt + 1, n), rng.integers(1, max_output + 1, n))])
    return df if block_tokens is None else with_block_ids(df, block_tokens)


def stream_block_ids(family: int, num_tokens: int, block_tokens: int) -> tuple[int, ...]:
    """Content ids of the first `num_tokens` tokens of a shared token stream `family`: granule j
    of family f has id f * 10**6 + j, so rows of one family share prefixes. Family 3 differs from
    family 0 only in its first granule (same later ids, no common prefix)."""
    n = -(-num_tokens // block_tokens)
    ids = [(0 if family == 3 else family) * 10**6 + j for j in range(n)]
    if family == 3 and ids:
        ids[0] = 3 * 10**6
    return tuple(ids)


def with_block_ids(df: pd.DataFrame, block_tokens: int = 8) -> pd.DataFrame:
    """`df` plus `block_ids` covering each row's prompt and output (family = prompt % 4) and
    `block_tokens`, so prefix caching has shared prefixes to find."""
    out = df.copy()
    out["block_ids"] = [stream_block_ids(int(p) % 4, int(p) + int(o), block_tokens)
                        for p, o in zip(df["prompt_tokens"], df["output_tokens"])]
    out["block_tokens"] = block_tokens
    return out


# Parameters a policy needs to run on the test executors above (which name no model), and the
# fewest instances it runs on: `disagg` splits instances into a prefill and a decode pool and
# sizes the KV it transfers from the model, so give it a KV size per token.
GENERIC_PARAMS: dict[str, dict] = {"disagg": {"kv_bytes_per_token": 131072.0}}
MIN_INSTANCES: dict[str, int] = {"disagg": 2}


def generic_params(policy: str, params: dict | None = None) -> dict:
    """`params` on top of what `policy` needs to run on LinearExecutor."""
    return {**GENERIC_PARAMS.get(policy, {}), **(params or {})}


@dataclass
class TierExecutor(LinearExecutor):
    """LinearExecutor that reports a KV size per token and pays KV tier copies (swap, prefix
    tier promotions) over a host and a remote link in the step's first iteration."""

    kv_bytes_per_token: float = 1000.0  # bytes of KV per token
    host_bandwidth: float = 1e6  # bytes/s of the host link
    host_latency_s: float = 1e-3  # seconds per host copy
    remote_bandwidth: float = 2.5e5  # bytes/s of the remote link
    remote_latency_s: float = 4e-3  # seconds per remote copy

    @property
    def links(self):
        from sim.memory.kv_moves import TierLinks
        from sim.memory.kv_transfer import Link

        return TierLinks(Link("host", self.host_latency_s, self.host_bandwidth),
                         Link("remote", self.remote_latency_s, self.remote_bandwidth),
                         self.kv_bytes_per_token)

    def instance_info(self, instance_id: int):
        from sim.core.executor import InstanceInfo

        return InstanceInfo(instance_id, self.capacity, self.name, self.has_draft,
                            self.kv_bytes_per_token, 1, kv_links=self.links)

    def iteration_times(self, step: Step) -> np.ndarray:
        """LinearExecutor's times, the step's KV tier copies paid in its first iteration."""
        times = super().iteration_times(step)
        times[0] += self.links.seconds(step)
        return times


def finishes(fn, seconds: float = 60.0) -> None:
    """Run `fn` in a thread: fails (instead of hanging the suite) when it never returns."""
    import threading

    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked: the special file was opened or read"
    if errors:
        raise errors[0]


def iterations_one_by_one(model, new: list[int], ctx: list[int], k: int) -> list[float]:
    """Reference for a k-iteration run of a cost model's `iteration_times(new, ctx, seqs)`:
    the first iteration as given, then k - 1 single decode iterations, one call each."""
    now = [a + b for a, b in zip(new, ctx)]
    out = [model.iteration_times(new, ctx, len(new))[0]]
    for _ in range(k - 1):
        out.append(model.iteration_times([1] * len(new), now, len(new))[0])
        now = [x + 1 for x in now]
    return out


def check_follow_ups_hit_previous_context(df: pd.DataFrame) -> tuple[object, int]:
    """Run `df` (a session-like trace: session_id, turn) through vllm_v0 with prefix caching on
    a fast linear executor and check every later turn's cached tokens: each full 16-token block
    of the previous request's prompt + output but its last token (whose KV was never computed).
    Returns (the run's result, the number of later turns checked)."""
    from policies.simulate import simulate

    ex = LinearExecutor(capacity=10**6, per_token_s=1e-5)
    res = simulate(df, "vllm_v0", {"enable_prefix_caching": True}, [ex])
    rec = res.records.assign(session_id=df["session_id"], turn=df["turn"])
    later = 0
    for _, turns in rec.groupby("session_id"):
        turns = turns.sort_values("turn")
        prev = turns.iloc[:-1]
        expected = ((prev["prompt_tokens"] + prev["output_tokens"] - 1) // 16 * 16).to_numpy()
        assert (turns["num_cached_tokens"].iloc[1:].to_numpy() == expected).all()
        later += len(turns) - 1
    return res, later
