"""Loading, second round (issue 28): the model file named is the one read and hashed; MoE fields
no model has are refused by name; the compiled build loads only what its manifest lists and
scripts/compile.py writes only into its own folders; pyarrow's floor excludes CVE-2023-47248."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from experiments.files.resume import file_digest, referenced_files
from sim.compiled import (ENV, MANIFEST, MARKER, MARKER_TEXT, CompiledBuildError, check_build,
                          interpreter_tag, source_hash)
from sim.models.catalog import get_model, model_config_file, model_from_config_dict, resolve_model
from sim.util.errors import ConfigError
from tests.factories import finishes

ROOT = Path(__file__).resolve().parents[2]
MOE = ROOT / "tests" / "fixtures" / "moe"
DENSE = ROOT / "tests" / "fixtures" / "hf_configs" / "mistral-7b-v0.1" / "config.json"


def fixture(name: str) -> dict:
    return json.loads((MOE / name / "config.json").read_text())




# ---- one resolution of a model path ---------------------------------------------------------
def test_a_json_file_is_read_as_named_not_the_folders_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**json.loads(DENSE.read_text()),
                                                      "sliding_window": None}))  # a dense 7B
    named = tmp_path / "mixtral.json"
    named.write_text(json.dumps(fixture("mixtral-8x7b")))
    spec = resolve_model(str(named))
    assert spec.moe is not None and spec.moe.num_experts == 8 and spec.name == "mixtral"
    assert spec.num_params == get_model("mixtral-8x7b").num_params
    assert resolve_model(str(tmp_path)).moe is None  # the folder: its config.json
    assert model_config_file(str(named)) == named
    assert model_config_file(str(tmp_path)) == tmp_path / "config.json"
    assert model_config_file("mixtral-8x7b") is None  # built-in: no file


def test_the_run_identity_hashes_the_file_that_was_read(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    named = tmp_path / "mixtral.json"
    named.write_text(json.dumps(fixture("mixtral-8x7b")))
    files = referenced_files({"model": str(named), "draft_model": "llama-68m"})
    assert files == {"model": file_digest(named)}  # mixtral.json, not config.json
    assert referenced_files({"model": str(tmp_path)})["model"] == \
        file_digest(tmp_path / "config.json")
    assert referenced_files({"model": "mixtral-8x7b"}) == {}


def test_a_model_path_under_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m.json").write_text(json.dumps(fixture("mixtral-8x7b")))
    assert resolve_model("~/m.json").moe is not None
    assert referenced_files({"model": "~/m.json"})["model"] == file_digest(tmp_path / "m.json")


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_special_file_as_model_config_is_refused_without_reading_it(tmp_path, kind):
    path = tmp_path / "model.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")

    def load() -> None:
        with pytest.raises(ConfigError, match="not a regular file") as err:
            resolve_model(str(path))
        assert err.value.field == "model" and err.value.value == str(path)
    finishes(load)


# ---- MoE fields present but impossible ------------------------------------------------------
MOE_CASES = [
    ("mixtral-8x7b", {"num_local_experts": 0}, "num_local_experts"),
    ("mixtral-8x7b", {"num_experts_per_tok": 0}, "num_experts_per_tok"),
    ("mixtral-8x7b", {"num_experts_per_tok": 9}, "num_experts_per_tok"),  # > 8 experts
    ("mixtral-8x7b", {"num_local_experts": -8}, "num_local_experts"),
    ("mixtral-8x7b", {"num_local_experts": True}, "num_local_experts"),
    ("qwen3-30b-a3b", {"num_experts": 0}, "num_experts"),
    ("qwen3-30b-a3b", {"moe_intermediate_size": 0}, "moe_intermediate_size"),
    ("qwen3-30b-a3b", {"decoder_sparse_step": 0}, "decoder_sparse_step"),
    ("qwen3-30b-a3b", {"decoder_sparse_step": 1000}, "decoder_sparse_step"),  # no MoE layer
    ("qwen3-30b-a3b", {"num_experts_per_tok": 129}, "num_experts_per_tok"),
    ("deepseek-v3", {"n_routed_experts": 0}, "n_routed_experts"),
    ("deepseek-v3", {"n_shared_experts": -1}, "n_shared_experts"),
    ("deepseek-v3", {"first_k_dense_replace": 61}, "first_k_dense_replace"),  # no MoE layer
    ("deepseek-v3", {"moe_layer_freq": 0}, "moe_layer_freq"),
]


@pytest.mark.parametrize("family,change,key", MOE_CASES)
def test_moe_fields_no_model_has_are_refused_by_name(family, change, key):
    with pytest.raises(ConfigError) as err:
        model_from_config_dict({**fixture(family), **change}, family, "config.json",
                               allow_moe=True)
    assert err.value.field == f"model.config.{key}", err.value


def test_a_mixtral_with_no_experts_is_not_read_as_dense(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**fixture("mixtral-8x7b"), "num_local_experts": 0}))
    with pytest.raises(ConfigError, match=r"model\.config\.num_local_experts=0: must be >= 1"):
        resolve_model(str(path))


def test_valid_moe_fixtures_still_load():
    for family in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"):
        spec = model_from_config_dict(fixture(family), family, allow_moe=True)
        assert spec.num_params == get_model(family).num_params
    dense_deepseek = {k: v for k, v in fixture("deepseek-v3").items() if k != "n_routed_experts"}
    assert model_from_config_dict(dense_deepseek, "d", allow_moe=True).moe is None


# ---- the compiled build ---------------------------------------------------------------------
def fake_build(tmp_path: Path, **manifest_changes) -> tuple[Path, Path]:
    """A current build of a package `pkg` with one module `mod` (a stand-in binary)."""
    src = tmp_path / "src" / "pkg"
    src.mkdir(parents=True)
    (src / "mod.py").write_text("x = 1\n")
    build = tmp_path / "build"
    (build / "pkg").mkdir(parents=True)
    binary = build / "pkg" / f"mod{EXTENSION_SUFFIXES[0]}"
    binary.write_bytes(b"compiled")
    manifest = {"interpreter": interpreter_tag(),
                "modules": {"pkg.mod": source_hash(src / "mod.py")},
                "binaries": {"pkg.mod": {"file": binary.name, "sha256": source_hash(binary)}},
                **manifest_changes}
    (build / MANIFEST).write_text(json.dumps(manifest))
    return build, src


def test_a_planted_module_in_the_build_is_refused_by_name(tmp_path):
    build, src = fake_build(tmp_path)
    check_build(build, "pkg", src)
    (build / "pkg" / "metrics.py").write_text("raise SystemExit('planted')\n")
    with pytest.raises(CompiledBuildError, match=r"pkg/metrics\.py is not listed in .*manifest"):
        check_build(build, "pkg", src)


def test_a_binary_whose_hash_differs_is_refused(tmp_path):
    build, src = fake_build(tmp_path)
    (build / "pkg" / f"mod{EXTENSION_SUFFIXES[0]}").write_bytes(b"swapped")
    with pytest.raises(CompiledBuildError, match=r"mod\..*so is missing or not the file that "
                                                 r"was built"):
        check_build(build, "pkg", src)


@pytest.mark.parametrize("text", [
    "{not json", "[]", json.dumps({"interpreter": 3}),
    json.dumps({"interpreter": "x", "modules": {"pkg.mod": "0" * 64}}),  # no binaries
    json.dumps({"interpreter": "x", "modules": {"pkg.mod": "short"}, "binaries": {}}),
    json.dumps({"interpreter": "x", "modules": {"pkg.mod": "0" * 64},
                "binaries": {"pkg.mod": {"file": "../../evil.so", "sha256": "0" * 64}}}),
])
def test_a_malformed_manifest_is_an_error_naming_it(tmp_path, text):
    build, src = fake_build(tmp_path)
    (build / MANIFEST).write_text(text)
    with pytest.raises(CompiledBuildError, match=rf"{build / MANIFEST} is (malformed|not a "
                                                 rf"readable JSON manifest)"):
        check_build(build, "pkg", src)


def test_a_planted_source_module_never_runs_under_servesim_compiled(tmp_path):
    build = tmp_path / "build"
    (build / "sim").mkdir(parents=True)
    (build / MANIFEST).write_text(json.dumps({"interpreter": interpreter_tag(),
                                              "modules": {}, "binaries": {}}))
    marker = tmp_path / "ran"
    (build / "sim" / "metrics.py").write_text(f"open({str(marker)!r}, 'w')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{ENV: str(build)})
    out = subprocess.run([sys.executable, "-c", "import sim.metrics.summary"], env=env, cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode != 0 and not marker.exists()
    assert "CompiledBuildError" in out.stderr and "metrics.py is not listed" in out.stderr


def compile_out(out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(ENV, None)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "compile.py"), "--out",
                           str(out), "--jobs", "1"], capture_output=True, text=True, env=env)


def test_compile_refuses_a_folder_that_is_not_its_own(tmp_path):
    out = tmp_path / "holiday"
    (out / "photos").mkdir(parents=True)
    (out / "letter.txt").write_text("dear ...")
    (out / "photos" / "beach.jpg").write_bytes(b"\xff\xd8jpeg")
    result = compile_out(out)
    assert result.returncode == 2
    assert f"--out {out}: holds files and is not a servesim build (no {MARKER}" in result.stderr
    assert (out / "letter.txt").read_text() == "dear ..."  # untouched
    assert (out / "photos" / "beach.jpg").read_bytes() == b"\xff\xd8jpeg"
    plain_file = tmp_path / "notes.txt"
    plain_file.write_text("x")
    result = compile_out(plain_file)
    assert result.returncode == 2 and "exists and is not a folder" in result.stderr
    assert plain_file.read_text() == "x"


def test_compile_may_write_a_new_folder_an_empty_one_or_its_own():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import compile as compile_script  # scripts/compile.py
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    tmp = Path(compile_script.tempfile.mkdtemp())
    try:
        assert compile_script.out_problem(tmp / "new") == ""
        assert compile_script.out_problem(tmp) == ""  # empty
        (tmp / "sim").mkdir()
        assert "not a servesim build" in compile_script.out_problem(tmp)
        (tmp / MARKER).write_text(MARKER_TEXT)
        assert compile_script.out_problem(tmp) == ""  # an earlier build: replaced whole
        (tmp / MARKER).write_text("something else")
        assert "not a servesim build" in compile_script.out_problem(tmp)
    finally:
        compile_script.shutil.rmtree(tmp)


# ---- dependencies ---------------------------------------------------------------------------
def test_pyarrow_floor_excludes_cve_2023_47248():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pyarrow = [Requirement(d) for d in project["dependencies"]
               if Requirement(d).name == "pyarrow"]
    assert len(pyarrow) == 1
    spec = pyarrow[0].specifier
    for vulnerable in ("12.0.0", "13.0.0", "14.0.0"):
        assert not spec.contains(vulnerable), f"pyproject.toml admits pyarrow {vulnerable}"
    assert spec.contains("14.0.1") and spec.contains("26.0.1")
