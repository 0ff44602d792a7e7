"""vLLM's random dataset (`vllm bench serve --dataset-name random`, traces/random_dataset.py): its
length bounds and draws are vLLM's, it is seeded, and its config and flags refuse bad values
naming the field or the flag."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.config.load import load_config
from experiments.run import parse_args
from experiments.sweep.workload import build_workload
from sim.util.errors import ConfigError
from traces.random_dataset import RandomDataset, length_bounds, random_lengths, random_trace

QUICKSTART = "experiments/configs/quickstart.yaml"  # synthetic workload


def vllm_bounds(input_len: int, output_len: int, ratio: float) -> tuple[int, ...]:
    """RandomDataset.get_sampling_params of vLLM (vllm/benchmarks/datasets.py) for a tokenizer
    that adds no special tokens: floor for the low ends, ceil for the high, outputs >= 1."""
    input_low = math.floor(input_len * (1 - ratio))
    input_high = math.ceil(input_len * (1 + ratio))
    output_low = max(math.floor(output_len * (1 - ratio)), 1)
    output_high = max(math.ceil(output_len * (1 + ratio)), 1)
    return input_low, input_high, output_low, output_high


PAIRS = [(1024, 128, 0.0), (1023, 127, 0.3), (7, 3, 0.5), (1, 1, 0.9), (100, 100, 0.1),
         (3, 5, 0.7), (1000, 999, 0.07), (513, 1, 0.0), (1, 1, 0.0), (4097, 255, 0.999)]


@pytest.mark.parametrize("input_len, output_len, ratio", PAIRS)
def test_length_bounds_are_vllms(input_len, output_len, ratio):
    cfg = RandomDataset(input_len=input_len, output_len=output_len, range_ratio=ratio,
                        prefix_len=1)
    assert (*cfg.input_bounds(), *cfg.output_bounds()) == vllm_bounds(input_len, output_len,
                                                                       ratio)


def test_length_bounds_by_hand():
    assert length_bounds(1024, 0.0) == (1024, 1024)  # ratio 0: every length the same
    assert length_bounds(7, 0.5) == (3, 11)  # floor(3.5), ceil(10.5): odd lengths
    assert length_bounds(100, 0.1) == (90, 111)  # 100 * 1.1 = 110.00000000000001 in float64
    assert length_bounds(3, 0.7) == (0, 6)  # a draw may be 0 (with a prefix)
    assert length_bounds(1, 0.9, minimum=1) == (1, 2)  # outputs are at least 1


def test_draws_are_vllms_for_a_seed_and_the_prefix_is_added():
    cfg = RandomDataset(input_len=200, output_len=50, range_ratio=0.25, prefix_len=30,
                        num_requests=500)
    prompt, output = random_lengths(cfg, seed=7)
    rng = np.random.default_rng(7)  # vLLM: default_rng(seed), inputs then outputs
    assert prompt.tolist() == (30 + rng.integers(150, 250 + 1, size=500)).tolist()
    assert output.tolist() == rng.integers(37, 63 + 1, size=500).tolist()
    assert prompt.min() >= 180 and prompt.max() <= 280 and prompt.min() < 190


def test_ratio_zero_gives_every_request_the_same_lengths():
    prompt, output = random_lengths(RandomDataset(input_len=511, output_len=33,
                                                  num_requests=100), seed=0)
    assert set(prompt.tolist()) == {511} and set(output.tolist()) == {33}


def test_seeded_and_lengths_independent_of_rate_and_burstiness():
    cfg = RandomDataset(input_len=64, output_len=16, range_ratio=0.5, num_requests=200)
    a, b = random_trace(cfg, 4.0, seed=3), random_trace(cfg, 4.0, seed=3)
    assert a.equals(b)
    assert not a.equals(random_trace(cfg, 4.0, seed=4))
    bursty = random_trace(RandomDataset(64, 16, 0.5, num_requests=200, burstiness=0.25), 9.0, 3)
    assert bursty["prompt_tokens"].tolist() == a["prompt_tokens"].tolist()
    assert bursty["output_tokens"].tolist() == a["output_tokens"].tolist()


def test_rate_inf_sends_all_at_zero_and_burstiness_sets_the_gap_cv():
    cfg = RandomDataset(input_len=10, output_len=10, num_requests=20_000, burstiness=0.25)
    assert (random_trace(cfg, math.inf, seed=0)["arrival_s"] == 0).all()
    gaps = np.diff(random_trace(cfg, 2.0, seed=0)["arrival_s"].to_numpy())
    assert gaps.mean() == pytest.approx(0.5, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)  # 1 / sqrt(0.25)


def test_a_prefix_is_one_shared_block_for_prefix_caching():
    df = random_trace(RandomDataset(input_len=8, output_len=4, prefix_len=48, num_requests=3),
                      1.0, seed=0)
    assert df["block_ids"].tolist() == [(0,)] * 3 and df["block_tokens"].tolist() == [48] * 3
    assert df["prompt_tokens"].tolist() == [56] * 3
    plain = random_trace(RandomDataset(input_len=8, output_len=4, num_requests=3), 1.0, seed=0)
    assert "block_ids" not in plain.columns


@pytest.mark.parametrize("fields, named", [
    ({"input_len": -1}, "random.input_len=-1"),
    ({"input_len": True}, "random.input_len=True"),
    ({"input_len": 0}, "random.input_len=0"),  # no prefix: a prompt could be empty
    ({"input_len": 1, "range_ratio": 0.5}, "random.input_len=1"),  # floor(0.5) = 0
    ({"output_len": 0}, "random.output_len=0"),
    ({"range_ratio": 1.0}, "random.range_ratio=1.0"),
    ({"range_ratio": -0.1}, "random.range_ratio=-0.1"),
    ({"range_ratio": math.nan}, "random.range_ratio=nan"),
    ({"prefix_len": -1}, "random.prefix_len=-1"),
    ({"num_requests": 0}, "random.num_requests=0"),
    ({"burstiness": 0}, "random.burstiness=0"),
    ({"burstiness": math.inf}, "random.burstiness=inf"),
])
def test_bad_values_name_the_field(fields, named):
    with pytest.raises(ConfigError) as err:
        RandomDataset(**fields)
    assert str(err.value).startswith(named)


def test_an_empty_draw_is_fine_with_a_prefix():
    df = random_trace(RandomDataset(input_len=0, output_len=1, prefix_len=5, num_requests=2),
                      1.0, seed=0)
    assert df["prompt_tokens"].tolist() == [5, 5]


# ---- config and flags -------------------------------------------------------------------------
def resolved(*argv: str):
    args = parse_args([QUICKSTART, *argv])
    return load_config(args.config, args.overrides)


def test_flags_replace_the_workload_as_the_yaml_form_does():
    cfg = resolved("--dataset-name", "random", "--random-input-len", "256",
                   "--random-output-len", "32", "--random-range-ratio", "0.5",
                   "--random-prefix-len", "16", "--num-prompts", "50", "--request-rate", "inf",
                   "--burstiness", "2", "--max-concurrency", "4")
    yaml_form = load_config(QUICKSTART, [
        "workload={random: {input_len: 256, output_len: 32, range_ratio: 0.5, prefix_len: 16, "
        "num_requests: 50, burstiness: 2}, max_concurrency: 4}",
        "request_rates=[inf]", "max_requests=50"])
    assert cfg == yaml_form
    assert cfg.workload.synthetic is None
    df = build_workload(cfg, None, math.inf, 0)
    assert len(df) == 50 and (df["arrival_s"] == 0).all()
    assert df["prompt_tokens"].between(16 + 128, 16 + 384).all()


def test_flags_keep_the_configs_concurrency_and_default_to_vllms_values():
    cfg = resolved("--set", "workload.max_concurrency=3", "--dataset-name", "random")
    assert cfg.workload.random == RandomDataset()  # 1024 / 128 / 0 / 0, 1000 prompts
    assert cfg.workload.max_concurrency == 3


def test_flags_on_a_random_config_set_only_their_fields():
    args = parse_args([QUICKSTART, "--set", "workload={random: {input_len: 64, output_len: 8}}",
                       "--random-range-ratio", "0.25", "--num-prompts", "9"])
    cfg = load_config(args.config, args.overrides)
    assert cfg.workload.random == RandomDataset(64, 8, 0.25, num_requests=9)


@pytest.mark.parametrize("argv, named", [
    (["--dataset-name", "sharegpt"], "--dataset-name='sharegpt'"),
    (["--random-input-len", "5"], "--random-input-len=5"),  # without --dataset-name random
    (["--dataset-name", "random", "--random-input-len", "-3"], "--random-input-len=-3"),
    (["--dataset-name", "random", "--random-input-len", "2.5"], "--random-input-len=2.5"),
    (["--dataset-name", "random", "--random-output-len", "0"], "--random-output-len=0"),
    (["--dataset-name", "random", "--random-range-ratio", "1"], "--random-range-ratio=1"),
    (["--dataset-name", "random", "--random-range-ratio", "abc"], "--random-range-ratio='abc'"),
    (["--dataset-name", "random", "--random-prefix-len", "-1"], "--random-prefix-len=-1"),
    (["--dataset-name", "random", "--random-input-len", "0"], "--random-input-len=0"),
])
def test_bad_flags_are_named(capsys, argv, named):
    with pytest.raises(SystemExit) as exc:
        parse_args([QUICKSTART, *argv])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("override, named", [
    ("workload={random: {range_ratio: 1.5}}", "workload.random.range_ratio=1.5"),
    ("workload={random: {input_len: 2.5}}", "workload.random.input_len=2.5"),
    ("workload={random: {prefix_len: -2}}", "workload.random.prefix_len=-2"),
    ("workload={random: {num_requests: 0}}", "workload.random.num_requests=0"),
    ("workload={random: {seed: 1}}", "workload.random.seed=1"),
])
def test_bad_yaml_values_name_the_field(override, named):
    with pytest.raises(ConfigError) as err:
        load_config(QUICKSTART, [override])
    assert str(err.value).startswith(named)
