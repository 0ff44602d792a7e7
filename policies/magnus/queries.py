"""What a length predictor reads about a request, and the per-application catalogue behind it.

A serving system sees a request's application and its prompt. Magnus separates the prompt into
the application's fixed instruction and the user's raw input; the catalogue, learned from the
training requests, holds each application's instruction text and its token count, so the user
input length is the prompt length minus the instruction's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from sim.core.request import Request

TRAINING_COLUMNS: tuple[str, ...] = ("app", "instruction", "input", "input_tokens",
                                     "prompt_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class LengthQuery:
    """One request as a length predictor sees it."""

    app: str  # application name ("" when unknown)
    instruction: str  # the application's instruction text ("" when unknown)
    user_input: str  # the user's raw input text ("" when the workload has no text)
    input_tokens: int  # tokens of the user input
    true_output_tokens: int  # ground truth: read only by oracle predictors and by learning


@dataclass(frozen=True)
class AppInfo:
    """One application's fixed instruction."""

    instruction: str  # instruction text prepended to every user input
    instruction_tokens: int  # tokens of the instruction in the prompt (prompt - input)


class AppCatalog:
    """Applications known from training requests."""

    def __init__(self, apps: Mapping[str, AppInfo] | None = None) -> None:
        self.apps = dict(apps or {})  # application name -> its instruction

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> AppCatalog:
        """Each app's most common instruction and median (prompt - input) tokens."""
        apps = {}
        for app, group in frame.groupby("app", sort=True):
            extra = (group["prompt_tokens"] - group["input_tokens"]).to_numpy()
            apps[str(app)] = AppInfo(str(group["instruction"].mode().iloc[0]),
                                     int(np.median(extra)))
        return cls(apps)

    def query(self, request: Request) -> LengthQuery:
        """Split the request's prompt into instruction and user input."""
        text = request.text or ""
        info = self.apps.get(request.app or "")
        if info is None:
            return LengthQuery(request.app or "", "", text, request.num_prompt_tokens,
                               request.target_output_tokens)
        user = text
        if text.startswith(info.instruction):
            user = text[len(info.instruction):].lstrip("\n")
        tokens = max(1, request.num_prompt_tokens - info.instruction_tokens)
        return LengthQuery(request.app or "", info.instruction, user, tokens,
                           request.target_output_tokens)


def queries_from_frame(frame: pd.DataFrame) -> list[LengthQuery]:
    """Queries of training requests (columns TRAINING_COLUMNS)."""
    missing = [c for c in TRAINING_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"training frame lacks column(s) {missing}")
    return [LengthQuery(str(a), str(i), str(u), int(n), int(o)) for a, i, u, n, o in zip(
        frame["app"], frame["instruction"], frame["input"], frame["input_tokens"],
        frame["output_tokens"])]
