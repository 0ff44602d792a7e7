"""`vllm bench serve` flags of experiments.run (experiments/bench/flags.py): each ends up in the
resolved config; a bad value is an error naming the flag and the value."""

from __future__ import annotations

import math

import pytest

from experiments.config.load import load_config
from experiments.run import parse_args

QUICKSTART = "experiments/configs/quickstart.yaml"  # synthetic workload
BYO = "experiments/configs/byo_workload.yaml"  # trace workload, retime gamma
CLIENTS = "experiments/configs/clients.yaml"  # multi-client mix


def resolved(*argv: str):
    args = parse_args(list(argv))
    return load_config(args.config, args.overrides)


def test_request_rate_replaces_request_rates():
    cfg = resolved(QUICKSTART, "--request-rate", "2,4.5,inf")
    assert cfg.request_rates == (2, 4.5, math.inf)
    assert resolved(QUICKSTART, "--request-rate", "1e3").request_rates == (1000.0,)
    assert resolved(QUICKSTART, "--request-rate", ".inf").request_rates == (math.inf,)


def test_seed_num_prompts_and_max_concurrency():
    cfg = resolved(QUICKSTART, "--seed", "0,3", "--num-prompts", "100",
                   "--max-concurrency", "8")
    assert cfg.seeds == (0, 3)
    assert cfg.max_requests == 100
    assert cfg.workload.max_concurrency == 8
    assert resolved(QUICKSTART, "--seed", "7").seeds == (7,)


def test_burstiness_of_a_synthetic_workload_is_gamma_with_cv():
    cfg = resolved(QUICKSTART, "--burstiness", "0.25")
    assert cfg.workload.synthetic.arrival == "gamma"
    assert cfg.workload.synthetic.cv == pytest.approx(2.0)  # 1 / sqrt(0.25)


def test_burstiness_retimes_a_trace():
    cfg = resolved(BYO, "--burstiness", "2", "--request-rate", "3")
    assert cfg.workload.trace.retime == "gamma"
    assert cfg.workload.trace.burstiness == 2
    assert cfg.request_rates == (3,)


def test_burstiness_sees_the_workload_after_set_overrides():
    args = parse_args([BYO, "--set", "workload.trace.retime=poisson", "--burstiness", "4"])
    assert args.overrides[-2:] == ["workload.trace.retime=gamma",
                                   "workload.trace.burstiness=4"]
    assert load_config(args.config, args.overrides).workload.trace.retime == "gamma"


def test_flags_override_set_and_leave_the_rest_alone():
    cfg = resolved(QUICKSTART, "--set", "request_rates=[1]", "--request-rate", "5")
    assert cfg.request_rates == (5,)
    assert resolved(QUICKSTART) == load_config(QUICKSTART)


@pytest.mark.parametrize("argv, named", [
    (["--request-rate", "0"], "--request-rate=0"),
    (["--request-rate", "abc"], "--request-rate='abc'"),
    (["--request-rate=-inf"], "--request-rate='-inf'"),
    (["--request-rate", "2,,3"], "--request-rate='2,,3'"),
    (["--request-rate", "2,2.0"], "--request-rate='2,2.0'"),
    (["--seed", "-1"], "--seed=-1"),
    (["--seed", "1.5"], "--seed=1.5"),
    (["--seed", "010"], "--seed"),
    (["--num-prompts", "0"], "--num-prompts=0"),
    (["--num-prompts", "ten"], "--num-prompts='ten'"),
    (["--max-concurrency", "2.5"], "--max-concurrency=2.5"),
    (["--burstiness", "0"], "--burstiness=0"),
    (["--burstiness", "inf"], "--burstiness='inf'"),
])
def test_bad_values_name_the_flag(capsys, argv, named):
    with pytest.raises(SystemExit) as exc:
        parse_args([QUICKSTART, *argv])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


def test_burstiness_of_a_client_mix_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args([CLIENTS, "--burstiness", "2"])
    err = capsys.readouterr().err
    assert "--burstiness=2" in err and "workload.clients" in err


def test_list_needs_no_config_with_flags():
    assert parse_args(["--list", "--burstiness", "2"]).list
