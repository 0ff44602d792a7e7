"""Seeded synthetic multi-turn sessions (chat conversations) with content ids for prefix reuse.

A session starts at a Poisson time, has a geometric number of turns (mean `mean_turns`, at most
`max_turns`), and each turn's prompt is the previous prompt + the previous answer + new input:
the session's token stream only grows (so a request's prompt is never shorter than the system
prompt plus one token). The next turn arrives a rough expected service time after
the previous one (`service_s_per_token` per output token) plus an exponential think time. A
session ends early before a later turn whose prompt would exceed `max_prompt_tokens`.

`block_ids` name the session's token stream in granules of `block_tokens` tokens and cover each
turn's prompt and answer, so the next turn can hit the previous turn's output blocks
(`sim/prefix_keys.py`). Granule i of session s has id (s + 1) * 2**32 + i, except granules lying
wholly inside the shared system prompt (`system_prompt_tokens`), whose id is i in every session.

`rate_per_s` is the mean request (turn) rate: sessions start at rate_per_s / E[turns], with
E[turns] the mean of the truncated geometric (the prompt cap can end sessions earlier still).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.errors import ConfigError, check_positive
from traces.arrivals import arrivals, arrivals_until
from traces.lengths import LENGTH_PRESETS, LengthDist
from traces.schema import validate_trace

SESSION_ID_STRIDE = 2**32  # content ids per session (granules of one session's stream)


@dataclass(frozen=True)
class SessionConfig:
    """A multi-turn session workload."""

    rate_per_s: float = 1.0  # mean requests (turns) per second over all sessions
    num_sessions: int | None = 100  # sessions (or use duration_s; whichever ends first)
    duration_s: float | None = None  # seconds; sessions start in [0, duration_s)
    mean_turns: float = 4.0  # turns per session: geometric with this mean (>= 1)
    max_turns: int = 32  # turns per session at most
    think_time_s: float = 10.0  # seconds, mean user think time after an answer (exponential)
    service_s_per_token: float = 0.02  # seconds per output token: the answer's rough duration
    system_prompt_tokens: int = 0  # tokens of a system prompt every session shares
    new_input: LengthDist = LENGTH_PRESETS["sharegpt"][0]  # tokens of new user input per turn
    output: LengthDist = LENGTH_PRESETS["sharegpt"][1]  # tokens of each answer
    max_prompt_tokens: int = 16384  # tokens; a session ends before a longer prompt
    block_tokens: int = 16  # tokens per content id (granule) of the token stream

    def __post_init__(self) -> None:
        if not 0 < self.rate_per_s < math.inf:
            raise ConfigError("sessions.rate_per_s", self.rate_per_s, "must be finite and > 0")
        if self.num_sessions is None and self.duration_s is None:
            raise ConfigError("sessions.num_sessions", None, "set num_sessions or duration_s")
        if self.duration_s is not None and not 0 < self.duration_s < math.inf:
            raise ConfigError("sessions.duration_s", self.duration_s, "must be finite and > 0")
        for name in ("num_sessions", "max_turns", "max_prompt_tokens", "block_tokens"):
            value = getattr(self, name)
            if value is None and name == "num_sessions":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"sessions.{name}", value, "must be an int >= 1")
        if not 1 <= self.mean_turns < math.inf:
            raise ConfigError("sessions.mean_turns", self.mean_turns, "must be finite and >= 1")
        check_positive("sessions.think_time_s", self.think_time_s, allow_zero=True)
        check_positive("sessions.service_s_per_token", self.service_s_per_token,
                       allow_zero=True)
        s = self.system_prompt_tokens
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError("sessions.system_prompt_tokens", s, "must be an int >= 0")
        for name in ("new_input", "output"):
            if not isinstance(getattr(self, name), LengthDist):
                raise ConfigError(f"sessions.{name}", getattr(self, name), "must be a LengthDist")

    @property
    def expected_turns(self) -> float:
        """Mean turns per session: the geometric's mean truncated at max_turns."""
        p = 1.0 / self.mean_turns
        return (1.0 - (1.0 - p) ** self.max_turns) / p

    @property
    def session_rate_per_s(self) -> float:
        """Session starts per second."""
        return self.rate_per_s / self.expected_turns


def stream_ids(cfg: SessionConfig, session: int, num_tokens: int) -> tuple[int, ...]:
    """Content ids of the first `num_tokens` tokens of session `session`'s stream."""
    g = cfg.block_tokens
    shared = cfg.system_prompt_tokens // g  # granules wholly inside the system prompt
    base = (session + 1) * SESSION_ID_STRIDE
    return tuple(i if i < shared else base + i for i in range(-(-num_tokens // g)))


def _session_rows(cfg: SessionConfig, session: int, start_s: float,
                  rng: np.random.Generator) -> list[tuple]:
    """The turns of one session: (arrival_s, prompt, output, session_id, turn, block_ids)."""
    turns = min(int(rng.geometric(1.0 / cfg.mean_turns)), cfg.max_turns)
    inputs = cfg.new_input.sample(turns, rng)
    outputs = cfg.output.sample(turns, rng)
    thinks = rng.exponential(cfg.think_time_s, turns) if cfg.think_time_s > 0 else \
        np.zeros(turns)
    rows: list[tuple] = []
    context, t = cfg.system_prompt_tokens, start_s
    for j in range(turns):
        prompt, out = context + int(inputs[j]), int(outputs[j])
        if j and prompt > cfg.max_prompt_tokens:
            break
        rows.append((t, prompt, out, f"s{session}", j, stream_ids(cfg, session, prompt + out)))
        context = prompt + out
        t += out * cfg.service_s_per_token + float(thinks[j])
    return rows


def session_trace(cfg: SessionConfig, seed: int) -> pd.DataFrame:
    """A validated trace of the sessions `cfg` starts; the same seed gives the same frame."""
    rng = np.random.default_rng(seed)
    if cfg.duration_s is None:
        starts = arrivals(cfg.session_rate_per_s, int(cfg.num_sessions or 0), rng=rng)
    else:
        starts = arrivals_until(cfg.session_rate_per_s, cfg.duration_s, rng=rng,
                                max_n=cfg.num_sessions)
    rows = [row for s, t0 in enumerate(starts) for row in _session_rows(cfg, s, float(t0), rng)]
    df = pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens",
                                     "session_id", "turn", "block_ids"])
    df["block_tokens"] = cfg.block_tokens
    df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    return validate_trace(df, f"sessions(seed={seed})")
