"""Frozen, validated parameters of `lacb` (length-aware continuous batching).

`lacb` is `vllm` (paged KV, prefill-first steps, preemption by recomputation) with three changes
driven by a generation-length predictor: waiting requests are admitted shortest predicted
remaining work first, a request that waited longer than `max_wait_s` goes first and is never
overtaken, and admission reserves KV for the prompt plus `kv_margin` x the predicted output.
The predictor is Magnus' (`policies/magnus/`): `predictor` takes the same settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from sim.util.errors import ConfigError, check_fraction, check_positive

from policies.kv_tier_config import refuse_kv_tiers
from policies.magnus.config import PredictorConfig, check_optional_seconds
from policies.paged_classes import refuse_priority
from policies.vllm import VllmConfig


@dataclass(frozen=True)
class LacbConfig(VllmConfig):
    predictor: PredictorConfig | Mapping[str, Any] = field(  # length predictor (or mapping)
        default_factory=PredictorConfig)
    kv_margin: float = 1.0  # KV reserved on admission: prompt + kv_margin x predicted outputs
    prompt_weight: float = 1.0  # weight of a prompt token vs an output token in the work key
    aging_tokens_per_s: float = 0.0  # tokens of work forgiven per second of waiting
    max_wait_s: float | None = 5.0  # seconds; longer waiters go first, FCFS; None: no bound
    predictor_retrain_period_s: float | None = 180.0  # seconds between predictor retrains
    predictor_error_tokens: float = 10.0  # tokens: a sample needs a larger error ...
    predictor_error_fraction: float = 0.1  # ... and one larger than this share of the truth
    retrain_delay_s: float = 10.0  # seconds from a retrain until the new model takes effect
    max_learning_samples: int = 5000  # most recent badly predicted requests kept for retraining

    def __post_init__(self) -> None:
        super().__post_init__()
        refuse_kv_tiers(self, "lacb's length-aware admission does not know swapped-out "
                              "requests or lower-tier prefix hits; use vllm_v0 or sarathi")
        refuse_priority(self, "lacb", "orders waiting requests by predicted work "
                        "(aging_tokens_per_s, max_wait_s); priority scheduling runs with vllm, "
                        "vllm_v0 and sarathi")
        object.__setattr__(self, "predictor", PredictorConfig.from_value(self.predictor))
        for name in ("kv_margin", "prompt_weight", "aging_tokens_per_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ConfigError(name, value, "must be a finite number >= 0")
        check_optional_seconds("max_wait_s", self.max_wait_s)
        check_optional_seconds("predictor_retrain_period_s", self.predictor_retrain_period_s)
        check_positive("predictor_error_tokens", self.predictor_error_tokens, allow_zero=True)
        check_fraction("predictor_error_fraction", self.predictor_error_fraction)
        check_positive("retrain_delay_s", self.retrain_delay_s, allow_zero=True)
        check_positive("max_learning_samples", self.max_learning_samples)
