"""Result files are written atomically and never through a planted link; one sweep at a time
holds a results folder, and a folder holds one sweep's results."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.files.outdir import ResultsWriteError, atomic_write
from experiments.files.outlock import LOCK_FILE, locked
from experiments.report.results import write_json
from tests.bad_input.test_sweep import RUN, SYNTH, count_runs, printed, sweep  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def temp_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.tmp"))


# ---- the temporary-file writer ---------------------------------------------------------------
def test_a_link_at_the_target_is_refused_by_name(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "summary.json"
    target.symlink_to(victim)
    with pytest.raises(ResultsWriteError) as info:
        write_json(target, {"a": 1})
    assert str(info.value) == (f"cannot write {target}: is a symbolic link (refusing to write "
                               f"through it; remove the link)")
    assert victim.read_text() == "keep me" and target.is_symlink()
    assert temp_files(tmp_path) == []


def test_a_link_planted_at_the_temporary_name_is_never_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "summary.json"
    planted = tmp_path / ".summary.json.aaaa.tmp"  # the first name the writer will draw
    planted.symlink_to(victim)
    (tmp_path / "summary.json.tmp").symlink_to(victim)  # the name the old writer used
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr("experiments.files.outdir.secrets.token_hex", lambda n: next(names))
    write_json(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1} and not target.is_symlink()
    assert victim.read_text() == "keep me"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)  # left alone
    assert not (tmp_path / ".summary.json.bbbb.tmp").exists()  # renamed onto the target


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "records.parquet"
    target.write_bytes(b"old")
    with pytest.raises(ResultsWriteError) as info:
        with atomic_write(target) as handle:
            handle.write(b"half")
            raise OSError(28, "No space left on device")
    assert str(info.value) == f"cannot write {target}: No space left on device"
    assert target.read_bytes() == b"old" and temp_files(tmp_path) == []


def test_a_writer_that_starts_and_ends_inside_another_leaves_both_whole(tmp_path):
    """The interleaving that broke fixed temporary names, made deterministic: B writes the
    whole file while A is half-way; both succeed and the file is A's (the last rename)."""
    target = tmp_path / "summary.csv"
    with atomic_write(target) as first:
        first.write(b"A" * 50_000)
        write_json(target, {"writer": "B"})  # begins and ends while A is open
        assert json.loads(target.read_text()) == {"writer": "B"}
        first.write(b"A" * 50_000)
    assert target.read_bytes() == b"A" * 100_000
    assert temp_files(tmp_path) == []


def _write_many(path: str, writer: int, count: int) -> None:
    for i in range(count):
        write_json(Path(path), {"writer": writer, "i": i, "pad": [writer] * 20_000})


def test_two_concurrent_writers_of_one_file_both_succeed_and_never_corrupt_it(tmp_path):
    target = tmp_path / "summary.json"
    write_json(target, {"writer": -1, "i": 0, "pad": []})
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_write_many, args=(str(target), w, 25)) for w in (0, 1)]
    for proc in writers:
        proc.start()
    seen = set()
    while any(proc.is_alive() for proc in writers):  # every read sees one whole version
        data = json.loads(target.read_text())
        assert len(data["pad"]) == (0 if data["writer"] == -1 else 20_000)
        seen.add(data["writer"])
    for proc in writers:
        proc.join()
    assert [proc.exitcode for proc in writers] == [0, 0]  # no writer failed
    final = json.loads(target.read_text())
    assert final["i"] == 24 and final["pad"] == [final["writer"]] * 20_000
    assert temp_files(tmp_path) == []


# ---- links in the results folder -------------------------------------------------------------
def test_a_linked_runs_folder_is_refused_and_nothing_is_deleted_through_it(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".keep.tmp-1").mkdir(parents=True)
    (elsewhere / ".x.steps-1.parquet").write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "runs").symlink_to(elsewhere)
    assert sweep(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert f"error: --out='{out / 'runs'}': is a symbolic link: refusing to write or delete " \
           f"through it" in err
    assert sorted(p.name for p in elsewhere.iterdir()) == [".keep.tmp-1", ".x.steps-1.parquet"]


def test_a_run_directory_linked_to_another_run_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    other = out / "runs" / "orca__rate2__seed0"
    before = (other / "records.parquet").read_bytes()
    import shutil
    shutil.rmtree(out / "runs" / RUN)
    (out / "runs" / RUN).symlink_to(other)
    assert sweep(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert f"run directory='{out / 'runs' / RUN}': is a symbolic link" in err
    assert (other / "records.parquet").read_bytes() == before


def test_a_link_planted_at_a_result_file_is_refused_by_name(tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    victim = tmp_path / "victim.csv"
    victim.write_text("keep me")
    (out / "summary.csv").unlink()
    (out / "summary.csv").symlink_to(victim)
    (out / "summary.json.tmp").symlink_to(victim)  # the old fixed temporary name
    capsys.readouterr()
    assert sweep(tmp_path, out) == 1
    err = capsys.readouterr().err
    assert f"cannot write {out / 'summary.csv'}: is a symbolic link" in err
    assert "Traceback" not in err and victim.read_text() == "keep me"


def test_stale_temporary_files_of_a_killed_writer_are_removed(tmp_path):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / ".summary.csv.0123.tmp").write_text("half")
    (out / ".capacity.csv.0123.tmp").write_text("a capacity search's, not the sweep's")
    (out / "runs" / RUN / ".bench.json.0123.tmp").symlink_to(victim)
    (out / "runs" / ".orca__rate2__seed0.tmp-0123").mkdir()
    assert sweep(tmp_path, out) == 0
    assert temp_files(out) == [out / ".capacity.csv.0123.tmp"]
    assert temp_files(out / "runs" / RUN) == []
    assert not list((out / "runs").glob(".*")) and victim.read_text() == "keep me"


# ---- one sweep per folder --------------------------------------------------------------------
def test_a_second_sweep_into_a_held_folder_is_refused_by_name(tmp_path, capsys, count_runs):
    out = tmp_path / "out"
    out.mkdir()
    with locked(out) as lock:
        lock.claim("other", tmp_path / "other.yaml")
        assert sweep(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert (f"error: --out='{out}': in use by sweep 'other' (config {tmp_path / 'other.yaml'}), "
            f"pid {os.getpid()} on ") in err
    assert "wait for it to finish, or use another --out" in err
    assert count_runs == [] and not (out / "runs").exists()
    assert sweep(tmp_path, out) == 0  # released: the folder is free again


HOLDER = """
import sys
from pathlib import Path
from experiments.files.outlock import locked

with locked(Path(sys.argv[1])) as lock:
    lock.claim("holder", None)
    print("held", flush=True)
    sys.stdin.read()  # until killed
"""


def test_a_lock_held_by_another_process_is_refused_until_it_is_killed(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert sweep(tmp_path, out) == 2
        err = capsys.readouterr().err
        assert f"--out='{out}': in use by sweep 'holder' (config not recorded), " \
               f"pid {holder.pid}" in err
        os.kill(holder.pid, signal.SIGKILL)  # a killed holder never cleans up
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
    assert (out / LOCK_FILE).exists()
    assert sweep(tmp_path, out) == 0  # the OS released the dead holder's lock


def test_a_sweep_of_another_config_into_the_same_folder_is_refused(tmp_path, capsys,
                                                                    count_runs):
    out = tmp_path / "out"
    first = dict(SYNTH, name="first")
    assert sweep(tmp_path, out, first) == 0
    summary = (out / "summary.csv").read_bytes()
    second = dict(SYNTH, name="second", policies=[{"name": "orca", "label": "vanilla"}])
    capsys.readouterr()
    assert sweep(tmp_path, out, second) == 2
    err = capsys.readouterr().err
    assert (f"error: --out='{out}': holds the results of sweep 'first' (config "
            f"{tmp_path / 'sweep.yaml'}), not of sweep 'second': one folder holds one sweep; "
            f"use another --out, or delete the folder to start over") in err
    assert len(count_runs) == 2  # the first sweep's runs only
    assert (out / "summary.csv").read_bytes() == summary
    assert json.loads((out / "config.json").read_text())["name"] == "first"
    assert sweep(tmp_path, out, first) == 0 and len(count_runs) == 2  # still the first's


def test_a_link_at_the_lock_file_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / LOCK_FILE).symlink_to(victim)
    assert sweep(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert f"--out='{out / LOCK_FILE}': is a symbolic link: refusing to lock through it" in err
    assert victim.read_text() == "keep me"


def test_the_same_sweep_twice_reuses_its_runs_and_rewrites_the_same_summary(tmp_path,
                                                                          count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    first = pd.read_csv(out / "summary.csv")
    assert sweep(tmp_path, out) == 0
    assert len(count_runs) == 2
    pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), first)
