"""The optional compiled hot modules (sim/compiled.py, scripts/compile.py): a build is used only
when asked for and current, and a sweep run on it writes the same files, byte for byte."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest
import yaml

from sim.compiled import (DEFAULT_DIR, ENV, MANIFEST, CompiledBuildError, activate, check_build,
                          interpreter_tag, requested_dir, source_hash)

ROOT = Path(__file__).resolve().parents[1]


def fake_build(tmp_path: Path, source: str = "x = 1\n", interpreter: str | None = None) -> tuple:
    """A package `pkg` with one module `mod` and a build manifest hashing it."""
    src = tmp_path / "src" / "pkg"
    src.mkdir(parents=True)
    (src / "mod.py").write_text(source)
    build = tmp_path / "build"
    (build / "pkg").mkdir(parents=True)
    binary = build / "pkg" / f"mod{EXTENSION_SUFFIXES[0]}"  # stands for the compiled module
    binary.write_bytes(b"not really an extension module")
    manifest = {"interpreter": interpreter or interpreter_tag(),
                "modules": {"pkg.mod": source_hash(src / "mod.py")},
                "binaries": {"pkg.mod": {"file": binary.name, "sha256": source_hash(binary)}}}
    (build / MANIFEST).write_text(json.dumps(manifest))
    return build, src


def test_unset_empty_and_zero_mean_pure_python(monkeypatch):
    for value in ("", "0", " 0 "):
        assert requested_dir(value) is None
    assert requested_dir("1") == DEFAULT_DIR
    monkeypatch.delenv(ENV, raising=False)
    path = ["/somewhere/pkg"]
    assert not activate("pkg", path) and path == ["/somewhere/pkg"]


def test_a_current_build_goes_ahead_of_the_sources(tmp_path, monkeypatch):
    build, src = fake_build(tmp_path)
    check_build(build, "pkg", src)
    monkeypatch.setenv(ENV, str(build))
    path = [str(src)]
    assert activate("pkg", path) and path == [str(build / "pkg"), str(src)]


def test_an_edited_source_makes_the_build_stale(tmp_path):
    build, src = fake_build(tmp_path)
    (src / "mod.py").write_text("x = 2\n")
    with pytest.raises(CompiledBuildError, match=r"stale: .*mod\.py changed"):
        check_build(build, "pkg", src)


def test_a_value_naming_no_build_is_refused_with_the_path(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "yes"))
    with pytest.raises(CompiledBuildError, match=r"SERVESIM_COMPILED: no compiled build in .*yes"):
        activate("pkg", [str(tmp_path)])


def test_compile_refuses_a_bad_jobs_value():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "compile.py"), "--jobs", "0"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--jobs=0: must be >= 1" in out.stderr


def test_a_missing_or_foreign_build_is_refused(tmp_path):
    with pytest.raises(CompiledBuildError, match="manifest.json missing"):
        check_build(tmp_path / "nothing", "pkg", tmp_path)
    build, src = fake_build(tmp_path, interpreter="cpython-99 .so")
    with pytest.raises(CompiledBuildError, match="is for 'cpython-99 .so'"):
        check_build(build, "pkg", src)


def run_sweep(config: Path, out: Path, compiled: Path | None) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(ENV, None)
    if compiled is not None:
        env[ENV] = str(compiled)
    subprocess.run([sys.executable, "-m", "experiments.run", str(config), "--out", str(out),
                    "--no-progress", "--jobs", "1"], check=True, env=env, cwd=ROOT,
                   capture_output=True, text=True)


SWEEP = {  # paged, chunked and iteration-level policies under KV pressure (preemptions)
    "name": "compiled_identity",
    "workload": {"synthetic": {"lengths": "sharegpt", "num_requests": 300}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-40GB", "gpu_memory_utilization": 0.45},
    "policies": [{"name": "vllm_v0"}, {"name": "vllm"}, {"name": "sarathi"}, {"name": "orca"},
                 {"name": "vllm_v0", "label": "two", "cluster": {"num_instances": 2}}],
    "request_rates": [2, 8], "seeds": [0],
}


CAN_BUILD = (importlib.util.find_spec("Cython") is not None and shutil.which("cc") is not None
             and (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file())


@pytest.mark.slow
@pytest.mark.skipif(not CAN_BUILD, reason="needs Cython, a C compiler and the Python headers "
                                          "(pip install -e '.[fast]')")
def test_a_sweep_on_the_compiled_build_writes_the_same_files(tmp_path):
    build = tmp_path / "build"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "compile.py"), "--out", str(build)],
                   check=True, capture_output=True, text=True)
    assert list((build / "sim" / "engine").glob("simulation.*"))
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(SWEEP))
    run_sweep(config, tmp_path / "pure", None)
    run_sweep(config, tmp_path / "compiled", build)
    runs = sorted(p.name for p in (tmp_path / "pure" / "runs").iterdir())
    assert len(runs) == 10
    for run in runs:
        a, b = tmp_path / "pure" / "runs" / run, tmp_path / "compiled" / "runs" / run
        for name in ("records.parquet", "events.parquet", "steps.parquet"):  # no measured time
            assert (a / name).read_bytes() == (b / name).read_bytes(), f"{run}/{name}"
