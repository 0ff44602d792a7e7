"""The model's context limit (`max_model_len`) a run enforces, as vLLM does.

Every executor that serves a known model names its context (`max_model_len`, tokens: the
model's `max_position_embeddings`). A run enforces the smallest of them, or a smaller limit the
user sets (`cluster.max_model_len`); a larger one is an error, not a silent extrapolation. The
engine rejects a prompt longer than the limit and cuts an output where prompt + output reach it
(sim/request.py `Request.apply_max_model_len`).
"""

from __future__ import annotations

from typing import Sequence

from sim.errors import ConfigError


def model_context(executors: Sequence[object]) -> int | None:
    """The smallest context (tokens) the executors' models support; None when none says."""
    limits = [int(lim) for lim in (getattr(ex, "max_model_len", None) for ex in executors)
              if lim is not None]
    return min(limits) if limits else None


def resolve_max_model_len(executors: Sequence[object], requested: int | None,
                          field: str = "cluster.max_model_len") -> int | None:
    """The limit a run enforces: `requested` (checked against the models' context), else the
    models' context; None only when no executor knows its model's context and none is asked."""
    context = model_context(executors)
    if requested is None:
        return context
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ConfigError(field, requested, "must be an int >= 1 (tokens)")
    if context is not None and requested > context:
        raise ConfigError(field, requested, f"above the model's context of {context} tokens "
                                            f"(max_position_embeddings); lower it or leave it "
                                            f"unset to use the model's")
    return requested
