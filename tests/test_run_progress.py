"""Without a terminal (CI, nohup, Ray) a sweep prints one plain, flushed line per finished run."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments import run

ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "progress", "workload": {"synthetic": {"num_requests": 20, "lengths": "alpaca"}},
        "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
        "policies": [{"name": "vanilla", "params": {"batch_size": 4}}, {"name": "orca"}],
        "request_rates": [2, 4], "seeds": [0]}
NAMES = ["vanilla__rate2__seed0", "orca__rate2__seed0", "vanilla__rate4__seed0",
         "orca__rate4__seed0"]


class FlushRecorder(io.StringIO):
    """A non-TTY stdout that remembers what had been written at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())

    def isatty(self) -> bool:
        return False


def config(tmp_path: Path) -> Path:
    path = tmp_path / "progress.yaml"
    path.write_text(yaml.safe_dump(TINY), encoding="utf-8")
    return path


def run_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[")]


@pytest.mark.parametrize("flag", [[], ["--no-progress"]])
def test_each_finished_run_is_a_line_flushed_at_once(tmp_path, monkeypatch, flag):
    stdout = FlushRecorder()
    monkeypatch.setattr(sys, "stdout", stdout)
    assert run.main([str(config(tmp_path)), "--out", str(tmp_path / "out"), *flag]) == 0
    lines = run_lines(stdout.getvalue())
    assert [line.split(":")[0] for line in lines] == \
        [f"[{i}/4] {name}" for i, name in enumerate(NAMES, start=1)]
    for line in lines:  # on the stream, not in a buffer, as soon as the run finished
        assert any(text.endswith(line + "\n") for text in stdout.flushed), line


def test_a_resumed_sweep_counts_from_the_finished_runs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert run.main([str(config(tmp_path)), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert run.main([str(config(tmp_path)), "--out", str(out), "--no-progress",
                     "--set", "request_rates=[2,4,8]"]) == 0
    text = capsys.readouterr().out
    assert "4 of 6 runs already finished: skipped" in text
    assert [line.split(":")[0] for line in run_lines(text)] == \
        ["[5/6] vanilla__rate8__seed0", "[6/6] orca__rate8__seed0"]


def test_stdout_to_a_pipe_gets_the_run_lines_and_no_bar(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "experiments.run", str(config(tmp_path)),
                           "--out", str(tmp_path / "out")], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300, check=True)
    assert len(run_lines(done.stdout)) == 4
    assert "\r" not in done.stderr and "run/s" not in done.stderr  # tqdm is off off a TTY
