"""Seeded plugin-call conversations (RTP-LLM's plugin-call KV reuse): the model's answer calls a
tool, the tool's result is appended and the model continues from the whole context.

A conversation starts with a user request: prompt = the shared system prompt + the user's
input. Its answer is a tool call (`call_output` tokens); the tool runs `tool_latency_s` seconds
and returns `tool_result` tokens, and the follow-up request's prompt is the previous prompt +
the previous output + the tool result, so prefix caching can reuse the whole previous context.
A conversation makes K plugin calls (geometric, mean `mean_calls` >= 1, at most `max_calls`) and
so K + 1 requests; request k < K outputs a call, request K the final answer (`output`). With
s = system_prompt_tokens, u the user input, c_i the calls and r_i the tool results:

    prompt_k  = s + u + sum_{i<k} (c_i + r_i)
    arrival_k = arrival_{k-1} + c_{k-1} * service_s_per_token + latency_{k-1}

The trace is open-loop: a request's finish is estimated as its arrival + its output tokens x
`service_s_per_token` (as `traces/sessions.py` estimates a turn's answer), and the follow-up
arrives the tool latency after that. A conversation ends before a follow-up whose prompt would
exceed `max_prompt_tokens` (its last request is then a call). Conversations start as a Poisson
process at rate_per_s x num_conversations / (their requests), so the requests come at
rate_per_s over the starts' expected span (`traces/session_starts.py`, by count).

Each request carries `session_id` (its conversation, so `session_affinity` keeps it on one
instance), `turn` (k), `tool_result_tokens` (r_{k-1}, 0 for the first) and `block_ids`
covering prompt and output (`traces/content_ids.py`: granules of the system prompt shared by
all conversations, the rest private to the conversation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError, check_positive
from traces.content_ids import STREAM_STRIDE, stream_ids
from traces.lengths import LENGTH_PRESETS, LengthDist
from traces.schema import validate_trace
from traces.session_starts import starts_for_count

LATENCY_KINDS = ("constant", "exponential")  # tool latency distributions
Request = tuple[float, int, int, int]  # (seconds after the start, prompt, output, tool result)


@dataclass(frozen=True)
class PluginCallConfig:
    """A plugin-call conversation workload (module docstring)."""

    rate_per_s: float = 1.0  # requests per second over all conversations (calls and answers)
    num_conversations: int = 100  # conversations (each a user request and its follow-ups)
    mean_calls: float = 1.0  # plugin calls per conversation: geometric with this mean (>= 1)
    max_calls: int = 8  # plugin calls per conversation at most
    tool_latency_s: float = 1.0  # seconds a tool takes (the mean when exponential)
    tool_latency: str = "constant"  # constant | exponential
    service_s_per_token: float = 0.02  # seconds per output token: a request's rough duration
    system_prompt_tokens: int = 0  # tokens of a system prompt every conversation shares
    user_input: LengthDist = LENGTH_PRESETS["sharegpt"][0]  # tokens of the user's request
    call_output: LengthDist = LengthDist("uniform", min_tokens=16, max_tokens=64)  # tokens
    # of a tool call the model writes
    tool_result: LengthDist = LengthDist("uniform", min_tokens=32, max_tokens=512)  # tokens
    # the tool returns (appended to the next prompt)
    output: LengthDist = LENGTH_PRESETS["sharegpt"][1]  # tokens of the final answer
    max_prompt_tokens: int = 16384  # tokens; a conversation ends before a longer prompt
    block_tokens: int = 16  # tokens per content id (granule) of the token stream

    def __post_init__(self) -> None:
        if not 0 < self.rate_per_s < math.inf:
            raise ConfigError("plugin_calls.rate_per_s", self.rate_per_s,
                              "must be finite and > 0 (follow-ups wait for their tool)")
        for name in ("num_conversations", "max_calls", "max_prompt_tokens", "block_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"plugin_calls.{name}", value, "must be an int >= 1")
        if not 1 <= self.mean_calls < math.inf:
            raise ConfigError("plugin_calls.mean_calls", self.mean_calls,
                              "must be finite and >= 1")
        if self.tool_latency not in LATENCY_KINDS:
            raise ConfigError("plugin_calls.tool_latency", self.tool_latency,
                              f"unknown; known: {', '.join(LATENCY_KINDS)}")
        for name in ("tool_latency_s", "service_s_per_token"):
            check_positive(f"plugin_calls.{name}", getattr(self, name), allow_zero=True)
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"plugin_calls.{name}", getattr(self, name), "must be finite")
        s = self.system_prompt_tokens
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError("plugin_calls.system_prompt_tokens", s, "must be an int >= 0")
        for name in ("user_input", "call_output", "tool_result", "output"):
            if not isinstance(getattr(self, name), LengthDist):
                raise ConfigError(f"plugin_calls.{name}", getattr(self, name),
                                  "must be a LengthDist")


def tool_latencies(cfg: PluginCallConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Seconds each of `n` tool calls takes."""
    if cfg.tool_latency == "exponential" and cfg.tool_latency_s > 0:
        return rng.exponential(cfg.tool_latency_s, n)
    return np.full(n, float(cfg.tool_latency_s))


def conversation(cfg: PluginCallConfig, rng: np.random.Generator) -> list[Request]:
    """One conversation's requests, the first at offset 0 (module docstring's closed forms)."""
    calls = min(int(rng.geometric(1.0 / cfg.mean_calls)), cfg.max_calls)
    user = int(cfg.user_input.sample(1, rng)[0])
    outputs = cfg.call_output.sample(calls, rng).tolist() + \
        cfg.output.sample(1, rng).tolist()
    results = cfg.tool_result.sample(calls, rng).tolist()
    latencies = tool_latencies(cfg, calls, rng).tolist()
    prompt, t, result = cfg.system_prompt_tokens + user, 0.0, 0
    out: list[Request] = []
    for k in range(calls + 1):
        if k and prompt > cfg.max_prompt_tokens:
            break
        out.append((t, prompt, int(outputs[k]), result))
        if k < calls:
            result = int(results[k])
            prompt += int(outputs[k]) + result
            t += outputs[k] * cfg.service_s_per_token + latencies[k]
    return out


def plugin_call_trace(cfg: PluginCallConfig, seed: int) -> pd.DataFrame:
    """A validated trace of `cfg`'s conversations; the same seed gives the same frame."""
    rng = np.random.default_rng(seed)
    convs = [conversation(cfg, rng) for _ in range(cfg.num_conversations)]
    starts = starts_for_count(cfg.rate_per_s, sum(map(len, convs)), len(convs), rng).starts_s
    rows = [(float(t0) + dt, prompt, out, f"p{c}", k, result,
             stream_ids(cfg.block_tokens, prompt + out, (c + 1) * STREAM_STRIDE,
                        cfg.system_prompt_tokens))
            for c, (t0, requests) in enumerate(zip(starts.tolist(), convs))
            for k, (dt, prompt, out, result) in enumerate(requests)]
    df = pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens",
                                     "session_id", "turn", "tool_result_tokens", "block_ids"])
    df["block_tokens"] = cfg.block_tokens
    df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    return validate_trace(df, f"plugin_calls(seed={seed})")
