"""Resumable, parallel sweeps: skip finished runs, record failures, same results in parallel."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments import run
from experiments.run import load_config
from experiments.sweep.runner import expand, run_hash

TINY = {
    "name": "sweep",
    "workload": {"synthetic": {"num_requests": 30, "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}}, {"name": "orca"}],
    "request_rates": [1, 4],
    "seeds": [0, 1],
}
METRICS = ["request_throughput", "mean_e2e_s", "p99_itl_s", "num_computed_tokens"]


def write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def sweep(tmp_path: Path, out: Path, *extra: str, raw: dict = TINY) -> int:
    return run.main([str(write(tmp_path, raw)), "--out", str(out), "--no-progress", *extra])


def test_runs_have_stable_hashes_that_ignore_labels(tmp_path):
    cfg = load_config(write(tmp_path, TINY))
    specs = expand(cfg)
    assert len(specs) == 8
    hashes = [run_hash(cfg, s) for s in specs]
    assert len(set(hashes)) == 8 and hashes == [run_hash(cfg, s) for s in expand(cfg)]
    relabelled = dict(TINY, policies=[{"name": "vanilla", "label": "vs",
                                       "params": {"batch_size": 4}}, {"name": "orca"}])
    cfg2 = load_config(write(tmp_path, relabelled))
    assert [run_hash(cfg2, s) for s in expand(cfg2)] == hashes


def test_resume_skips_finished_runs_and_reruns_changed_ones(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    import policies.simulate
    calls = []
    real = policies.simulate.simulate
    monkeypatch.setattr(policies.simulate, "simulate",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    assert sweep(tmp_path, out) == 0
    assert calls == []  # everything was finished
    changed = dict(TINY, policies=[{"name": "vanilla", "params": {"batch_size": 2}},
                                   {"name": "orca"}])
    assert sweep(tmp_path, out, raw=changed) == 0
    assert len(calls) == 4  # only vanilla's runs changed hash
    assert len(pd.read_csv(out / "summary.csv")) == 8


def test_a_run_that_raises_is_recorded_and_the_sweep_goes_on(tmp_path):
    raw = dict(TINY, policies=[{"name": "vanilla", "params": {"batch_size": 4}},
                               {"name": "orca", "params": {"max_tokens": 8}}])
    # orca with max_tokens 8 rejects most requests: fine; make a run crash instead
    raw["policies"][1]["params"] = {"max_batch_size": 4}
    out = tmp_path / "out"
    import policies.simulate
    real = policies.simulate.simulate

    def crash_on_orca(trace, policy, *a, **k):
        if policy == "orca":
            raise ZeroDivisionError("injected")
        return real(trace, policy, *a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(policies.simulate, "simulate", crash_on_orca)
    try:
        assert sweep(tmp_path, out, raw=raw) == 1
    finally:
        mp.undo()
    failures = json.loads((out / "failures.json").read_text())
    assert len(failures) == 4 and all("ZeroDivisionError: injected" in f["error"]
                                      for f in failures)
    assert len(pd.read_csv(out / "summary.csv")) == 4  # vanilla's runs landed
    assert not list((out / "runs").glob(".*tmp*"))
    assert sweep(tmp_path, out, raw=raw) == 0  # resumed: only the failed runs ran again
    assert not (out / "failures.json").exists()


def test_two_processes_give_the_same_results_as_one(tmp_path):
    assert sweep(tmp_path, tmp_path / "one") == 0
    assert sweep(tmp_path, tmp_path / "two", "--jobs", "2") == 0
    one = pd.read_csv(tmp_path / "one" / "summary.csv").set_index("run").sort_index()
    two = pd.read_csv(tmp_path / "two" / "summary.csv").set_index("run").sort_index()
    pd.testing.assert_frame_equal(one[METRICS], two[METRICS])


def test_ray_path_runs_on_a_local_ray_instance(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    raw = dict(TINY, seeds=[0])
    try:
        assert sweep(tmp_path, tmp_path / "ray", "--ray", raw=raw) == 0
    finally:
        ray.shutdown()
    assert sweep(tmp_path, tmp_path / "local", raw=raw) == 0
    a = pd.read_csv(tmp_path / "ray" / "summary.csv").set_index("run").sort_index()
    b = pd.read_csv(tmp_path / "local" / "summary.csv").set_index("run").sort_index()
    pd.testing.assert_frame_equal(a[METRICS], b[METRICS])


def test_bad_jobs_is_a_clear_error(tmp_path, capsys):
    assert sweep(tmp_path, tmp_path / "out", "--jobs", "0") == 2
    err = capsys.readouterr().err
    assert "--jobs=0" in err and "must be >= 1" in err


def test_ray_without_the_extra_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert sweep(tmp_path, tmp_path / "out", "--ray") == 2
    err = capsys.readouterr().err
    assert "--ray" in err and "pip install" in err


# ---- the driver dies or is interrupted: its pool workers go with it ---------------------------
DRIVER = """
import os, sys, time
import experiments.sweep.runner as sweep
from experiments.run import main

real = sweep.simulate_run


def gated(cfg, spec, on_done=None):  # runs at rate 4 wait (for a file that never appears)
    give_up = time.monotonic() + 1200  # so that a leaked worker ends some day (a hang guard)
    while spec.rate == 4 and time.monotonic() < give_up:
        time.sleep(0.05)
    return real(cfg, spec, on_done)


sweep.simulate_run = gated
sys.exit(main([sys.argv[1], "--out", sys.argv[2], "--no-progress", "--jobs", "2"]))
"""


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_for(condition, what: str, deadline_s: float = 60.0) -> None:
    import time
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("signum, code", [("SIGKILL", -9), ("SIGTERM", 143), ("SIGINT", 130)])
def test_workers_exit_with_the_driver_and_the_sweep_resumes(tmp_path, signum, code):
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    out = tmp_path / "out"
    driver = subprocess.Popen([sys.executable, str(script), str(write(tmp_path, TINY)), str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def blocked() -> bool:  # rate 1's four runs landed, both workers wait on rate 4
            assert driver.poll() is None, f"the driver exited early: {driver.communicate()[1]}"
            done = out / "summary.csv"
            return (done.is_file() and len(pd.read_csv(done)) == 4
                    and len(_children(driver.pid)) == 2)
        _wait_for(blocked, "the first four runs", deadline_s=600.0)  # a hang guard, not a timing
        workers = _children(driver.pid)
        os.kill(driver.pid, getattr(signal, signum))
        stdout, stderr = driver.communicate(timeout=600)  # a hang guard, not a timing
    finally:
        if driver.poll() is None:
            driver.kill()
    try:
        _wait_for(lambda: not any(_alive(w) for w in workers), "the workers to exit",
                  600.0)  # a hang guard, not a timing
    finally:
        for worker in filter(_alive, workers):  # left running: the test failed; clean up
            os.kill(worker, signal.SIGKILL)
    assert driver.returncode == code, stderr
    if signum != "SIGKILL":
        assert "interrupted; finished runs are already written" in stderr
        assert "Traceback" not in stderr
    assert sweep(tmp_path, out) == 0  # resumes: only rate 4 runs
    assert sweep(tmp_path, tmp_path / "whole") == 0
    resumed = pd.read_csv(out / "summary.csv")  # no measured time in it: equal as a whole
    whole = pd.read_csv(tmp_path / "whole" / "summary.csv")
    pd.testing.assert_frame_equal(resumed, whole)
    assert not list((out / "runs").glob(".*"))


def test_workers_fork_only_from_a_process_without_torch(monkeypatch):
    """A process that loaded torch may hold its thread pools' locks at a fork (a forked worker
    would wait forever): its workers start from a clean process instead."""
    import multiprocessing
    import sys

    from experiments.sweep.pool import start_method

    monkeypatch.setitem(sys.modules, "torch", object())
    assert start_method() == "spawn"
    monkeypatch.delitem(sys.modules, "torch")
    if "fork" in multiprocessing.get_all_start_methods():
        assert start_method() == "fork"
