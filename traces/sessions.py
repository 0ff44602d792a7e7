"""Seeded synthetic multi-turn sessions (chat conversations) with content ids for prefix reuse.

A session starts at a Poisson time, has a geometric number of turns (mean `mean_turns`, at most
`max_turns`), and each turn's prompt is the previous prompt + the previous answer + new input:
the session's token stream only grows (so a request's prompt is never shorter than the system
prompt plus one token). The next turn arrives a rough expected service time after
the previous one (`service_s_per_token` per output token) plus an exponential think time. A
session ends early before a later turn whose prompt would exceed `max_prompt_tokens`.

`block_ids` name the session's token stream in granules of `block_tokens` tokens and cover each
turn's prompt and answer, so the next turn can hit the previous turn's output blocks
(`sim/memory/prefix_keys.py`). Granule i of session s has id (s + 1) * 2**32 + i, except granules lying
wholly inside the shared system prompt (`system_prompt_tokens`), whose id is i in every session.

`rate_per_s` is the delivered request (turn) rate. With `duration_s` it is exact: the turns
arriving in the window [0, duration_s), divided by duration_s, are round(rate_per_s *
duration_s) / duration_s, and the rate is flat over the window: sessions start as a stationary
Poisson process, those begun before 0 in progress at 0 (their turns from 0 on are kept, so a
session's first turn in the trace may be a later one, whose prompt holds history no earlier
request computed), at the session rate that delivers this count from the sessions drawn
themselves (`traces/session_starts.py`), so `max_turns` and the prompt cap are counted.
Sessions begun in the window keep their turns after it (an experiment's `duration_s` drops
them). With `num_sessions` alone, sessions start from 0 at rate_per_s * num_sessions / (their
turns), so the turns come at rate_per_s over the starts' expected span (the first turns ramp
up). `num_sessions` with `duration_s` caps the sessions in the trace (the first by start);
when it binds, `SessionDraw.note` says so and a warning is logged.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError, check_positive
from traces.content_ids import STREAM_STRIDE
from traces.content_ids import stream_ids as stream_ids_of
from traces.lengths import LENGTH_PRESETS, LengthDist
from traces.schema import validate_trace
from traces.session_starts import (Starts, in_window_turns, starts_for_count,
                                   starts_for_window)

SESSION_ID_STRIDE = STREAM_STRIDE  # content ids per session (granules of its stream)
DEFAULT_NUM_SESSIONS = 100  # sessions when neither num_sessions nor duration_s is set

Turn = tuple[float, int, int]  # (seconds after the session starts, prompt tokens, output tokens)


@dataclass(frozen=True)
class SessionConfig:
    """A multi-turn session workload."""

    rate_per_s: float = 1.0  # requests (turns) per second delivered over all sessions
    num_sessions: int | None = None  # sessions at most (None: 100 without duration_s, no cap)
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
    def session_cap(self) -> int | None:
        """Sessions at most: num_sessions, else 100 without duration_s, else no cap (None)."""
        if self.num_sessions is not None or self.duration_s is not None:
            return self.num_sessions
        return DEFAULT_NUM_SESSIONS

    @property
    def expected_turns(self) -> float:
        """Mean turns per session before the prompt cap: the geometric truncated at max_turns."""
        p = 1.0 / self.mean_turns
        return (1.0 - (1.0 - p) ** self.max_turns) / p

    @property
    def target_arrivals(self) -> int | None:
        """Turns asked in [0, duration_s): round(rate_per_s * duration_s), at least 1; None
        without duration_s."""
        if self.duration_s is None:
            return None
        return max(1, int(math.floor(self.rate_per_s * self.duration_s + 0.5)))


@dataclass(frozen=True)
class SessionDraw:
    """The trace of one seed's sessions, with how they were placed."""

    trace: pd.DataFrame  # the validated trace, by arrival
    session_rate_per_s: float  # sessions started per second
    note: str | None  # why num_sessions ended the session starts early; None if it did not


def stream_ids(cfg: SessionConfig, session: int, num_tokens: int) -> tuple[int, ...]:
    """Content ids of the first `num_tokens` tokens of session `session`'s stream."""
    return stream_ids_of(cfg.block_tokens, num_tokens, (session + 1) * SESSION_ID_STRIDE,
                         cfg.system_prompt_tokens)


def session_turns(cfg: SessionConfig, rng: np.random.Generator) -> list[Turn]:
    """One session's turns, the first at offset 0; it ends before a prompt over the cap."""
    turns = min(int(rng.geometric(1.0 / cfg.mean_turns)), cfg.max_turns)
    inputs = cfg.new_input.sample(turns, rng)
    outputs = cfg.output.sample(turns, rng)
    thinks = rng.exponential(cfg.think_time_s, turns) if cfg.think_time_s > 0 else \
        np.zeros(turns)
    out: list[Turn] = []
    context, t = cfg.system_prompt_tokens, 0.0
    for j in range(turns):
        prompt, answer = context + int(inputs[j]), int(outputs[j])
        if j and prompt > cfg.max_prompt_tokens:
            break
        out.append((t, prompt, answer))
        context = prompt + answer
        t += answer * cfg.service_s_per_token + float(thinks[j])
    return out


def place(cfg: SessionConfig, rng: np.random.Generator) -> tuple[list[list[Turn]], Starts]:
    """Every session's turns and the starts that deliver cfg.rate_per_s (module docstring)."""
    sessions: list[list[Turn]] = []
    target = cfg.target_arrivals
    if target is None:
        n = int(cfg.session_cap or 0)
        sessions = [session_turns(cfg, rng) for _ in range(n)]
        return sessions, starts_for_count(cfg.rate_per_s, sum(map(len, sessions)), n, rng)

    def draw() -> np.ndarray:
        sessions.append(session_turns(cfg, rng))
        return np.array([turn[0] for turn in sessions[-1]])

    assert cfg.duration_s is not None
    return sessions, starts_for_window(target, cfg.duration_s, draw, rng)


def placed_turns(cfg: SessionConfig, sessions: list[list[Turn]],
                 starts: np.ndarray) -> list[tuple[float, list[tuple[int, Turn]]]]:
    """(start, [(turn index, turn)]) of each session with a turn in the trace, by start."""
    out = []
    for turns, start in zip(sessions, starts.tolist()):
        keep = np.ones(len(turns), bool) if cfg.duration_s is None else \
            in_window_turns(start, np.array([t[0] for t in turns]), cfg.duration_s)
        if keep.any():
            out.append((start, [(j, turn) for j, turn in enumerate(turns) if keep[j]]))
    out.sort(key=lambda item: item[0])
    return out


def cap_note(cfg: SessionConfig, placed: int, last_start_s: float,
             arrivals_s: np.ndarray) -> str:
    """What a binding num_sessions cap cost: where the starts ended and the turns delivered."""
    assert cfg.duration_s is not None
    window = int(((arrivals_s >= 0) & (arrivals_s < cfg.duration_s)).sum())
    return (f"sessions.num_sessions={cfg.num_sessions} ended session starts at "
            f"{last_start_s:.1f} s of duration_s={cfg.duration_s:g} ({placed} sessions "
            f"would have run): {window} turns in [0, {cfg.duration_s:g}) s = "
            f"{window / cfg.duration_s:.3g} req/s against rate {cfg.rate_per_s:g} req/s asked")


def session_draw(cfg: SessionConfig, seed: int) -> SessionDraw:
    """The sessions `cfg` starts with `seed`; the same seed gives the same draw. A binding
    num_sessions cap is logged as a warning and kept in the draw's note."""
    sessions, starts = place(cfg, np.random.default_rng(seed))
    placed = placed_turns(cfg, sessions, starts.starts_s)
    kept = placed if cfg.session_cap is None else placed[:cfg.session_cap]
    rows = [(t0 + dt, prompt, out, f"s{s}", j, stream_ids(cfg, s, prompt + out))
            for s, (t0, turns) in enumerate(kept) for j, (dt, prompt, out) in turns]
    df = pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens",
                                     "session_id", "turn", "block_ids"])
    df["block_tokens"] = cfg.block_tokens
    df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    note = None
    if cfg.duration_s is not None and len(kept) < len(placed):
        note = cap_note(cfg, len(placed), kept[-1][0], df["arrival_s"].to_numpy())
        logging.getLogger(__name__).warning("sessions(seed=%d): %s", seed, note)
    trace = validate_trace(df, f"sessions(seed={seed})")
    return SessionDraw(trace, starts.session_rate_per_s, note)


def session_trace(cfg: SessionConfig, seed: int) -> pd.DataFrame:
    """A validated trace of the sessions `cfg` starts; the same seed gives the same frame."""
    return session_draw(cfg, seed).trace
