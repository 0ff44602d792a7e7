"""The model's context limit (`max_model_len`) a run enforces, as vLLM does.

Every executor that serves a known model names its context (`max_model_len`, tokens: the
model's `max_position_embeddings`). A run enforces the smallest of them, or a smaller limit the
user sets (`cluster.max_model_len`); a larger one is an error, not a silent extrapolation. The
engine rejects a prompt longer than the limit and cuts an output where prompt + output reach it
(sim/core/request.py `Request.apply_max_model_len`).

An executor may also say up to which length its cost model is exact (`exact_up_to`: a model's
sliding window, which no cost model prices, sim/models/model_spec.py). A run whose limit, set or the
model's own, is longer is a ConfigError naming `max_model_len`: never priced as another model.
"""

from __future__ import annotations

from typing import Sequence

from sim.util.errors import ConfigError


def model_context(executors: Sequence[object]) -> int | None:
    """The smallest context (tokens) the executors' models support; None when none says."""
    limits = [int(lim) for lim in (getattr(ex, "max_model_len", None) for ex in executors)
              if lim is not None]
    return min(limits) if limits else None


def exact_limit(executors: Sequence[object]) -> tuple[int, str] | None:
    """The shortest (tokens, why) up to which the executors' cost models are exact, if any
    executor has such a bound."""
    bounds = [b for b in (getattr(ex, "exact_up_to", None) for ex in executors) if b is not None]
    return min(bounds, key=lambda b: b[0]) if bounds else None


def check_exact(executors: Sequence[object], limit: int | None, requested: int | None,
                field: str) -> None:
    """ConfigError naming `field` when the run's limit exceeds an executor's `exact_up_to`."""
    bound = exact_limit(executors)
    if bound is None or (limit is not None and limit <= bound[0]):
        return
    tokens, why = bound
    given = "" if requested is not None else f" (unset: the model's context, {limit} tokens)"
    raise ConfigError(field, requested, f"a sequence may reach more than {tokens} tokens{given}, "
                                        f"but {why}; set {field} <= {tokens} to run it")


def resolve_max_model_len(executors: Sequence[object], requested: int | None,
                          field: str = "cluster.max_model_len") -> int | None:
    """The limit a run enforces: `requested` (checked against the models' context), else the
    models' context; None only when no executor knows its model's context and none is asked.
    A limit beyond an executor's `exact_up_to` is a ConfigError (`check_exact`)."""
    context = model_context(executors)
    if requested is None:
        check_exact(executors, context, None, field)
        return context
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ConfigError(field, requested, "must be an int >= 1 (tokens)")
    if context is not None and requested > context:
        raise ConfigError(field, requested, f"above the model's context of {context} tokens "
                                            f"(max_position_embeddings); lower it or leave it "
                                            f"unset to use the model's")
    check_exact(executors, requested, requested, field)
    return requested
