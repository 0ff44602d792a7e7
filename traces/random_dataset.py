"""vLLM's random benchmark dataset (`vllm bench serve --dataset-name random`) as a seeded trace.

Lengths follow vLLM's `RandomDataset.sample` (vllm/benchmarks/datasets.py, read at commit
0056b87f): with L = input_len and r = range_ratio in [0, 1), each prompt draws a length uniformly
from the integers [floor(L * (1 - r)), ceil(L * (1 + r))] and each output one from
[max(floor(O * (1 - r)), 1), max(ceil(O * (1 + r)), 1)]; every prompt then starts with the same
`prefix_len` tokens (`--random-prefix-len`), so a prompt has prefix_len + its drawn length tokens.
A draw may be 0 when the prefix is not empty; prefix_len + floor(L * (1 - r)) must be >= 1.

The lengths come from `numpy.random.default_rng(seed)`, drawn as vLLM draws them (every input
length, then every output length), so a seed gives the lengths `--seed` gives vLLM for a
tokenizer that adds no special tokens (vLLM subtracts the k special tokens a tokenizer adds, e.g.
a BOS, from L before drawing, and the server adds them back). Arrivals come from a second stream
of the seed: Gamma gaps of shape `burstiness` (`--burstiness`; 1 = Poisson) at the run's rate,
every request at 0 when the rate is inf (`--request-rate inf`). With a prefix, each request gets
`block_ids` (0,) covering `block_tokens` = prefix_len tokens: prefix caching sees the shared
prefix and nothing else (sim/memory/prefix_keys.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError
from traces.arrivals import arrivals, cv_from_burstiness
from traces.schema import validate_trace

PREFIX_BLOCK_ID = 0  # the content id of the shared prefix (one granule of prefix_len tokens)
ARRIVAL_STREAM = 1  # arrivals draw from default_rng([seed, ARRIVAL_STREAM]); lengths from seed


@dataclass(frozen=True)
class RandomDataset:
    """vLLM's random dataset; defaults are `vllm bench serve`'s."""

    input_len: int = 1024  # tokens: centre of the drawn prompt length (--random-input-len)
    output_len: int = 128  # tokens: centre of the drawn output length (--random-output-len)
    range_ratio: float = 0.0  # dimensionless, in [0, 1): half-width of the ranges / length
    prefix_len: int = 0  # tokens every prompt starts with, shared (--random-prefix-len)
    num_requests: int = 1000  # requests (--num-prompts)
    burstiness: float = 1.0  # Gamma shape of the arrival gaps (--burstiness; 1 = Poisson)

    def __post_init__(self) -> None:
        _check_int("random.input_len", self.input_len, 0)
        _check_int("random.output_len", self.output_len, 1)
        _check_int("random.prefix_len", self.prefix_len, 0)
        _check_int("random.num_requests", self.num_requests, 1)
        ratio = self.range_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
            raise ConfigError("random.range_ratio", ratio, "must be a number in [0, 1)")
        b = self.burstiness
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b < math.inf:
            raise ConfigError("random.burstiness", b, "must be a finite number > 0")
        low = self.input_bounds()[0]
        if self.prefix_len + low < 1:
            raise ConfigError("random.input_len", self.input_len,
                              f"too small: with range_ratio {ratio:g} and prefix_len "
                              f"{self.prefix_len} a prompt could have {self.prefix_len + low} "
                              f"tokens; prefix_len + floor(input_len * (1 - range_ratio)) "
                              f"must be >= 1")

    def input_bounds(self) -> tuple[int, int]:
        """The drawn prompt length's range (tokens, both ends included), before the prefix."""
        return length_bounds(self.input_len, self.range_ratio)

    def output_bounds(self) -> tuple[int, int]:
        """The output length's range (tokens, both ends included)."""
        return length_bounds(self.output_len, self.range_ratio, minimum=1)


def _check_int(field: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(field, value, f"must be an int >= {minimum}")


def length_bounds(length: int, ratio: float, minimum: int = 0) -> tuple[int, int]:
    """vLLM's integer range around `length`: [floor(length * (1 - ratio)),
    ceil(length * (1 + ratio))], each end at least `minimum` (1 for outputs)."""
    low = math.floor(length * (1 - ratio))
    high = math.ceil(length * (1 + ratio))
    return max(low, minimum), max(high, minimum)


def random_lengths(cfg: RandomDataset, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens with the prefix, output tokens) of every request, int64; seeded as vLLM
    seeds its draws (input lengths first, then output lengths)."""
    rng = np.random.default_rng(seed)
    in_low, in_high = cfg.input_bounds()
    out_low, out_high = cfg.output_bounds()
    drawn = rng.integers(in_low, in_high + 1, size=cfg.num_requests)
    outputs = rng.integers(out_low, out_high + 1, size=cfg.num_requests)
    return (cfg.prefix_len + drawn).astype(np.int64), outputs.astype(np.int64)


def random_trace(cfg: RandomDataset, rate_per_s: float, seed: int) -> pd.DataFrame:
    """A validated trace of `cfg.num_requests` requests at `rate_per_s` (inf: all at 0)."""
    if not isinstance(cfg, RandomDataset):
        raise ConfigError("random", cfg, "must be a RandomDataset")
    prompt, output = random_lengths(cfg, seed)
    rng = np.random.default_rng([seed, ARRIVAL_STREAM])
    times = arrivals(rate_per_s, cfg.num_requests, cv=cv_from_burstiness(cfg.burstiness),
                     rng=rng)
    columns: dict[str, object] = {"arrival_s": times, "prompt_tokens": prompt,
                                  "output_tokens": output}
    if cfg.prefix_len > 0:
        columns["block_ids"] = [(PREFIX_BLOCK_ID,)] * cfg.num_requests
        columns["block_tokens"] = np.full(cfg.num_requests, cfg.prefix_len, dtype=np.int64)
    return validate_trace(pd.DataFrame(columns), f"random(seed={seed})")
