"""Seeded synthetic traces: determinism, rates, burstiness, lengths and re-timing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.util.errors import ConfigError
from traces.schema import trace_stats, validate_trace
from traces.synthetic import (LENGTH_PRESETS, LengthDist, SyntheticConfig, arrivals,
                              poisson_from_lengths, resample_lengths, scale_rate,
                              synthetic_trace)


def gaps_cv(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean())


def test_same_seed_same_frame() -> None:
    cfg = SyntheticConfig(rate_per_s=3.0, num_requests=500, arrival="gamma", cv=2.0)
    pd.testing.assert_frame_equal(synthetic_trace(cfg, 7), synthetic_trace(cfg, 7))
    assert not synthetic_trace(cfg, 7).equals(synthetic_trace(cfg, 8))


def test_poisson_rate_and_cv() -> None:
    times = arrivals(4.0, 20_000, rng=np.random.default_rng(0))
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    assert (times.size - 1) / times[-1] == pytest.approx(4.0, rel=0.03)
    assert gaps_cv(times) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_cv(cv: float) -> None:
    times = arrivals(10.0, 200_000, cv=cv, rng=np.random.default_rng(1))
    assert gaps_cv(times) == pytest.approx(cv, rel=0.10)
    assert (times.size - 1) / times[-1] == pytest.approx(10.0, rel=0.05)


def test_zero_cv_is_even_spacing() -> None:
    times = arrivals(2.0, 5, cv=0.0, rng=np.random.default_rng(0))
    assert times.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_duration_mode() -> None:
    cfg = SyntheticConfig(rate_per_s=20.0, duration_s=500.0)
    df = synthetic_trace(cfg, 3)
    assert df["arrival_s"].max() < 500.0
    assert len(df) == pytest.approx(10_000, rel=0.05)
    both = SyntheticConfig(rate_per_s=20.0, duration_s=500.0, num_requests=100)
    assert len(synthetic_trace(both, 3)) == 100


def test_length_kinds() -> None:
    rng = np.random.default_rng(0)
    assert LengthDist("constant", mean=64).sample(3, rng).tolist() == [64, 64, 64]
    u = LengthDist("uniform", min_tokens=5, max_tokens=9).sample(10_000, rng)
    assert u.min() == 5 and u.max() == 9
    ln = LengthDist("lognormal", mean=500, cv=0.5).sample(50_000, rng)
    assert ln.mean() == pytest.approx(500, rel=0.02)
    assert ln.std() / ln.mean() == pytest.approx(0.5, rel=0.05)
    clipped = LengthDist("lognormal", mean=500, cv=2, min_tokens=10, max_tokens=900)
    s = clipped.sample(10_000, rng)
    assert s.min() >= 10 and s.max() <= 900 and s.dtype == np.int64
    z = LengthDist("zipf", zipf_a=1.5, min_tokens=4, max_tokens=1000).sample(10_000, rng)
    assert z.min() == 4 and z.max() <= 1000


@pytest.mark.parametrize("name, prompt_mean, output_mean", [
    ("sharegpt", 161, 338), ("alpaca", 20, 58)])
def test_presets(name: str, prompt_mean: float, output_mean: float) -> None:
    cfg = SyntheticConfig.from_preset(name, num_requests=50_000)
    s = trace_stats(synthetic_trace(cfg, 0))
    assert s["prompt_mean"] == pytest.approx(prompt_mean, rel=0.06)
    assert s["output_mean"] == pytest.approx(output_mean, rel=0.06)
    assert set(LENGTH_PRESETS) >= {"sharegpt", "alpaca"}


@pytest.mark.parametrize("kwargs, field", [
    ({"rate_per_s": 0.0, "num_requests": 5}, "synthetic.rate_per_s"),
    ({}, "synthetic.num_requests"),
    ({"num_requests": 0}, "synthetic.num_requests"),
    ({"duration_s": -1.0}, "synthetic.duration_s"),
    ({"num_requests": 5, "arrival": "pareto"}, "synthetic.arrival"),
    ({"num_requests": 5, "cv": 2.0}, "synthetic.cv"),
    ({"num_requests": 5, "arrival": "gamma", "cv": -1.0}, "synthetic.cv"),
])
def test_config_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        SyntheticConfig(**kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("kwargs, field", [
    ({"kind": "normal"}, "length.kind"),
    ({"kind": "lognormal", "mean": 10, "cv": 0}, "length.cv"),
    ({"min_tokens": 0}, "length.min_tokens"),
    ({"min_tokens": 10, "max_tokens": 5, "mean": 7}, "length.max_tokens"),
    ({"kind": "constant", "mean": 50, "max_tokens": 20}, "length.mean"),
    ({"kind": "zipf", "zipf_a": 1.0}, "length.zipf_a"),
])
def test_length_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        LengthDist(**kwargs)
    assert info.value.field == field


def test_resample_lengths_draws_pairs() -> None:
    real = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0], "prompt_tokens": [10, 20, 30],
                         "output_tokens": [1, 2, 3]})
    out = resample_lengths(real, 1000, np.random.default_rng(0))
    assert list(out.columns) == ["prompt_tokens", "output_tokens"] and len(out) == 1000
    assert set(zip(out["prompt_tokens"], out["output_tokens"])) == {(10, 1), (20, 2), (30, 3)}


def test_scale_rate() -> None:
    cfg = SyntheticConfig(rate_per_s=2.0, num_requests=2000, arrival="gamma", cv=3.0)
    df = synthetic_trace(cfg, 0)
    fast = scale_rate(df, 4.0)
    assert trace_stats(fast)["rate_per_s"] == pytest.approx(4 * trace_stats(df)["rate_per_s"])
    assert trace_stats(fast)["interarrival_cv"] == pytest.approx(
        trace_stats(df)["interarrival_cv"])
    target = scale_rate(df, target_rate_per_s=7.5)
    assert trace_stats(target)["rate_per_s"] == pytest.approx(7.5)
    assert df["arrival_s"].iloc[-1] > fast["arrival_s"].iloc[-1]  # input untouched
    with pytest.raises(ConfigError):
        scale_rate(df, 2.0, target_rate_per_s=3.0)
    with pytest.raises(ConfigError):
        scale_rate(df, -1.0)


def test_poisson_from_lengths_keeps_requests() -> None:
    real = pd.DataFrame({"arrival_s": [5.0, 5.0, 9.0], "prompt_tokens": [10, 20, 30],
                         "output_tokens": [1, 2, 3], "app": ["a", "b", "c"]})
    out = poisson_from_lengths(real, 2.0, seed=1)
    assert out["app"].tolist() == ["a", "b", "c"]
    assert out["arrival_s"].iloc[0] == 0.0 and out["arrival_s"].is_monotonic_increasing
    pd.testing.assert_frame_equal(out, poisson_from_lengths(real, 2.0, seed=1))
    big = poisson_from_lengths(resample_lengths(real, 20_000, np.random.default_rng(0)),
                               5.0, seed=2)
    assert trace_stats(big)["rate_per_s"] == pytest.approx(5.0, rel=0.03)


dists = st.one_of(
    st.builds(LengthDist, kind=st.just("constant"), mean=st.integers(1, 5000)),
    st.builds(LengthDist, kind=st.just("uniform"), min_tokens=st.integers(1, 50),
              max_tokens=st.integers(50, 5000)),
    st.builds(LengthDist, kind=st.just("lognormal"), mean=st.floats(1, 5000),
              cv=st.floats(0.05, 5), max_tokens=st.just(5000)),
    st.builds(LengthDist, kind=st.just("zipf"), zipf_a=st.floats(1.05, 4)),
)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300),
       rate=st.floats(0.01, 1000), cv=st.floats(0, 20), prompt=dists, output=dists)
def test_synthetic_always_valid(seed: int, n: int, rate: float, cv: float,
                                prompt: LengthDist, output: LengthDist) -> None:
    cfg = SyntheticConfig(rate_per_s=rate, num_requests=n, arrival="gamma", cv=cv,
                          prompt=prompt, output=output)
    df = synthetic_trace(cfg, seed)
    assert len(df) == n
    assert np.all(np.diff(df["arrival_s"].to_numpy()) >= 0)
    assert df["arrival_s"].iloc[0] == 0.0 and np.isfinite(df["arrival_s"]).all()
    assert df["prompt_tokens"].dtype == np.int64 and (df["prompt_tokens"] >= 1).all()
    assert (df["output_tokens"] >= 1).all()
    pd.testing.assert_frame_equal(validate_trace(df, "again"), df)
