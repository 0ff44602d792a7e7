"""Multi-turn sessions deliver the asked turn rate (issue 26): exactly round(rate x duration)
turns in [0, duration_s), flat over the window, and a num_sessions cap that binds is reported."""

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import yaml

from experiments import run
from experiments.config.load import load_config
from experiments.sweep.workload import WORKLOAD_NOTE, build_workload
from traces.lengths import LengthDist
from traces.sessions import DEFAULT_NUM_SESSIONS, SessionConfig, session_draw

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
EXAMPLES = ["prefix_sessions.yaml", "prefix_sessions_pressure.yaml", "prefix_affinity.yaml"]


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("rate", [2.0, 8.0, 32.0])
def test_the_multi_turn_examples_deliver_the_asked_rate(example, rate):
    cfg = load_config(CONFIGS / example)
    sessions = cfg.workload.sessions
    assert sessions is not None and cfg.duration_s == sessions.duration_s
    window = cfg.duration_s
    for seed in cfg.seeds:
        df = build_workload(cfg, None, rate, seed)  # the run's workload, capped by the config
        delivered = int((df["arrival_s"] < window).sum()) / window
        assert delivered == pytest.approx(rate, rel=0.05)
        drawn = session_draw(dataclasses.replace(sessions, rate_per_s=rate), seed)
        arrivals = drawn.trace["arrival_s"]
        assert ((arrivals >= 0) & (arrivals < window)).sum() == round(rate * window)
        assert drawn.note is None and WORKLOAD_NOTE not in df.attrs


@pytest.mark.parametrize("rate", [8.0, 32.0])
def test_the_rate_is_flat_over_the_window(rate):
    sessions = load_config(CONFIGS / "prefix_sessions.yaml").workload.sessions
    df = session_draw(dataclasses.replace(sessions, rate_per_s=rate), 0).trace
    counts, _ = np.histogram(df["arrival_s"], bins=[0, 100, 200, 300])
    assert counts / 100 == pytest.approx([rate] * 3, rel=0.10)  # no ramp from 0


@pytest.mark.parametrize("changes", [
    {},
    {"max_prompt_tokens": 600, "mean_turns": 12.0},  # the prompt cap ends most sessions
    {"max_turns": 1},
    {"duration_s": 3.0, "rate_per_s": 0.4},  # one turn asked
    {"duration_s": 20.0, "think_time_s": 60.0},  # sessions longer than the window
])
def test_the_window_holds_exactly_the_asked_turns(changes):
    cfg = SessionConfig(rate_per_s=3.0, duration_s=120.0, mean_turns=5.0, think_time_s=8.0,
                        new_input=LengthDist("uniform", min_tokens=1, max_tokens=200),
                        output=LengthDist("uniform", min_tokens=1, max_tokens=100))
    cfg = dataclasses.replace(cfg, **changes)
    assert cfg.duration_s is not None
    for seed in range(3):
        drawn = session_draw(cfg, seed)
        arrivals = drawn.trace["arrival_s"]
        assert ((arrivals >= 0) & (arrivals < cfg.duration_s)).sum() == cfg.target_arrivals
        assert drawn.trace.equals(session_draw(cfg, seed).trace)


def test_turns_at_one_instant_give_the_nearest_count():
    cfg = SessionConfig(rate_per_s=3.0, duration_s=120.0, think_time_s=0.0,
                        service_s_per_token=0.0)  # a session's turns share one threshold
    for seed in range(3):
        df = session_draw(cfg, seed).trace
        largest = int(df.groupby("session_id").size().max())
        assert abs(int((df["arrival_s"] < 120.0).sum()) - 360) <= largest / 2


def test_num_sessions_defaults_to_a_cap_only_without_a_duration():
    assert SessionConfig().session_cap == DEFAULT_NUM_SESSIONS
    assert SessionConfig(duration_s=60.0).session_cap is None
    assert SessionConfig(num_sessions=5, duration_s=60.0).session_cap == 5


def test_a_binding_session_cap_is_noted_and_logged(caplog):
    cfg = SessionConfig(rate_per_s=2.0, duration_s=300.0, num_sessions=5)
    with caplog.at_level(logging.WARNING, logger="traces.sessions"):
        drawn = session_draw(cfg, 0)
    assert drawn.trace["session_id"].nunique() == 5
    assert drawn.note is not None and "sessions.num_sessions=5" in drawn.note
    assert "req/s against rate 2 req/s asked" in drawn.note
    assert any(drawn.note in r.getMessage() for r in caplog.records)
    loose = session_draw(dataclasses.replace(cfg, num_sessions=10**6), 0)
    assert loose.note is None


def test_a_binding_session_cap_reaches_the_summary_and_the_console(tmp_path, capsys):
    raw = {"name": "capped", "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
           "workload": {"sessions": {"num_sessions": 3, "duration_s": 60}},
           "policies": [{"name": "vllm_v0"}], "request_rates": [2], "duration_s": 60}
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    assert run.main([str(path), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(next(out.glob("runs/*/summary.json")).read_text())
    assert "sessions.num_sessions=3" in summary[WORKLOAD_NOTE]
    assert "sessions.num_sessions=3" in capsys.readouterr().err
    assert "sessions.num_sessions=3" in (out / "table.txt").read_text()
