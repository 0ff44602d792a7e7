"""Compiled hot modules, optional: the simulator's own sources built with Cython.

A long trace spends its time in per-step Python (docs/scale.md). `scripts/compile.py` builds the
modules in `MODULES` from these very sources with Cython (no separate implementation: Python
semantics, annotations not used as C types, no fused multiply-add) into a build directory with a
manifest of each source's SHA-256. Setting the environment variable `SERVESIM_COMPILED` puts that
build ahead of the sources:

    SERVESIM_COMPILED=1       the build in <checkout>/.compiled
    SERVESIM_COMPILED=DIR     the build in DIR
    unset, "" or "0"          pure Python (the default)

`sim/__init__.py` and `policies/__init__.py` call `activate` for their package. A build that is
missing, made for another interpreter, older than any of its sources, with a malformed manifest,
an extension file whose SHA-256 is not the one its manifest lists, or any file its manifest does
not list in a package folder (a planted `metrics.py` would run instead of the source) stops the
import with a `CompiledBuildError` naming the file: only what the manifest lists is loaded.
Results are the same to the byte either way (tests/test_compiled.py compares a sweep's files).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

ENV = "SERVESIM_COMPILED"  # environment variable naming the build to use
ROOT = Path(__file__).resolve().parents[1]  # the checkout holding sim/ and policies/
DEFAULT_DIR = ROOT / ".compiled"  # where `scripts/compile.py` builds by default
MANIFEST = "manifest.json"  # in the build directory: interpreter and source hashes
MARKER = ".servesim-build"  # in the build directory: scripts/compile.py made it (replaceable)
MARKER_TEXT = "servesim compiled build (scripts/compile.py); safe to delete\n"  # its content
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")  # pkg.mod
SHA256 = re.compile(r"^[0-9a-f]{64}$")  # a hex SHA-256 digest
MODULES = (  # the per-step path of the paged, chunked and iteration-level policies
    "sim.engine.simulation", "sim.core.request", "sim.core.emit", "sim.core.executor",
    "sim.cluster.cost_executor", "sim.cost.cost_model", "sim.core.run_ends",
    "sim.memory.block_counter", "sim.memory.block_batch", "sim.memory.block_manager",
    "sim.records.recorder", "sim.records.record_log", "sim.engine.request_source",
    "sim.engine.trace_rows", "sim.cost.stage_model", "sim.cost.stage_attention",
    "sim.core.step_shape", "sim.cost.stage_times", "sim.cost.moe_cost", "sim.cluster.draft",
    "sim.cost.overhead", "sim.engine.timeouts", "sim.engine.admission", "sim.memory.kv_tiers",
    "sim.memory.kv_moves", "sim.memory.kv_offload", "sim.memory.block_pool",
    "sim.memory.block_cache", "sim.memory.block_runs", "sim.memory.block_private",
    "policies.base", "policies.routing", "policies.paged", "policies.paged_decode",
    "policies.paged_instance", "policies.paged_prefix_jumps", "policies.prefix_caching",
    "policies.paged_classes", "policies.priority", "policies.speculative", "policies.swap",
    "policies.swap_space", "policies.kv_tiers", "policies.vllm", "policies.vllm_v1",
    "policies.sarathi", "policies.orca", "policies.disagg", "policies.disagg_pools",
    "policies.vllm_offload", "policies.paged_steps",
)


class CompiledBuildError(ImportError):
    """SERVESIM_COMPILED names a build that cannot stand for the sources."""


def source_hash(path: Path) -> str:
    """SHA-256 of a file's bytes (a source, or a built extension module)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def interpreter_tag() -> str:
    """What a build must match: the interpreter's cache tag and extension suffix."""
    return f"{sys.implementation.cache_tag} {EXTENSION_SUFFIXES[0]}"


def requested_dir(value: str | None = None) -> Path | None:
    """The build directory SERVESIM_COMPILED (or `value`) asks for; None: pure Python."""
    value = os.environ.get(ENV, "") if value is None else value
    if value.strip() in ("", "0"):
        return None
    return DEFAULT_DIR if value.strip() == "1" else Path(value).expanduser().resolve()


def read_manifest(build: Path) -> dict[str, Any]:
    """The build's manifest, checked: CompiledBuildError naming the file unless it is a JSON
    object with an interpreter, each module's source SHA-256 (`modules`) and its extension
    file and that file's SHA-256 (`binaries`)."""
    manifest = build / MANIFEST
    redo = f"rebuild with `python scripts/compile.py --out {build}` or unset {ENV}"
    if not manifest.is_file():
        raise CompiledBuildError(f"{ENV}: no compiled build in {build} ({MANIFEST} missing); "
                                 f"{redo}")
    try:
        info = json.loads(manifest.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CompiledBuildError(f"{ENV}: {manifest} is not a readable JSON manifest "
                                 f"({exc}); {redo}") from None
    why = manifest_problem(info)
    if why:
        raise CompiledBuildError(f"{ENV}: {manifest} is malformed: {why}; {redo}")
    return info


def manifest_problem(info: Any) -> str:
    """What is wrong with a parsed manifest ("" when nothing is)."""
    if not isinstance(info, dict):
        return f"a JSON {type(info).__name__}, not an object"
    if not isinstance(info.get("interpreter"), str):
        return "no interpreter"
    modules, binaries = info.get("modules"), info.get("binaries")
    if not isinstance(modules, dict) or not isinstance(binaries, dict):
        return "no modules / binaries objects (a build from an older scripts/compile.py)"
    for name, digest in modules.items():
        entry = binaries.get(name)
        if not MODULE_NAME.match(name) or not isinstance(digest, str) \
                or not SHA256.match(digest):
            return f"modules[{name!r}] is not a module name with a SHA-256"
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) \
                or not SHA256.match(entry["sha256"]) or not _binary_name(name, entry.get("file")):
            return f"binaries[{name!r}] is not its extension file's name and SHA-256"
    extra = sorted(set(binaries) - set(modules))
    return f"binaries[{extra[0]!r}] has no source hash in modules" if extra else ""


def _binary_name(module: str, file: Any) -> bool:
    """Whether `file` is a plain file name of `module`'s extension (engine.cpython-311-...so)."""
    stem = module.rpartition(".")[2]
    return isinstance(file, str) and any(file == stem + suffix for suffix in EXTENSION_SUFFIXES)


def package_dir(build: Path, package: str) -> Path:
    """The folder of `package` (dotted, e.g. sim.engine) inside a build."""
    return build.joinpath(*package.split("."))


def check_build(build: Path, package: str, sources: Path) -> None:
    """CompiledBuildError unless `build` holds a current build of `package`'s modules: its
    manifest well formed and for this interpreter, each listed module's source unchanged and
    its extension file's SHA-256 the manifest's, and nothing else in the package's folder (a
    file the manifest does not list would be imported ahead of the sources)."""
    info = read_manifest(build)
    redo = f"rebuild with `python scripts/compile.py --out {build}` or unset {ENV}"
    if info["interpreter"] != interpreter_tag():
        raise CompiledBuildError(f"{ENV}: the build in {build} is for "
                                 f"{info['interpreter']!r}, this is {interpreter_tag()!r}; "
                                 f"{redo}")
    listed: set[str] = set()
    for name, digest in sorted(info["modules"].items()):
        if name.rpartition(".")[0] != package:
            continue
        src = sources / f"{name.rpartition('.')[2]}.py"  # `sources`: the package's folder
        if not src.is_file() or source_hash(src) != digest:
            raise CompiledBuildError(f"{ENV}: the compiled build in {build} is stale: {src} "
                                     f"changed since it was built; {redo}")
        binary = package_dir(build, package) / info["binaries"][name]["file"]
        if not binary.is_file() or source_hash(binary) != info["binaries"][name]["sha256"]:
            raise CompiledBuildError(f"{ENV}: {binary} is missing or not the file that was "
                                     f"built (its SHA-256 differs from {build / MANIFEST}); "
                                     f"{redo}")
        listed.add(binary.name)
    folder = package_dir(build, package)
    stray = sorted(p.name for p in folder.iterdir() if p.name not in listed
                   and not (p.is_dir() and (sources / p.name / "__init__.py").is_file())) \
        if folder.is_dir() else []  # a sub-package's folder is checked by its own activate
    if stray:
        raise CompiledBuildError(f"{ENV}: {folder / stray[0]} is not listed in "
                                 f"{build / MANIFEST}: a build's folder holds only the modules "
                                 f"its manifest lists (anything else would be imported ahead "
                                 f"of the sources); remove it or {redo}")


def activate(package: str, path: list[str]) -> bool:
    """Put the requested build of `package` (its `__path__` is `path`) ahead of its sources;
    False when SERVESIM_COMPILED asks for none."""
    build = requested_dir()
    if build is None:
        return False
    sources = Path(path[-1])
    check_build(build, package, sources)
    path.insert(0, str(package_dir(build, package)))
    return True


def is_active() -> bool:
    """Whether `sim` runs from a compiled build (for reports and benchmarks)."""
    package = sys.modules.get("sim")
    return package is not None and len(package.__path__) > 1 and requested_dir() is not None
