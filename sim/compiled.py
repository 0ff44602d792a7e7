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
missing, made for another interpreter, or older than any of its sources stops the import with a
`CompiledBuildError` naming the file: a stale build would run code that is no longer in the tree.
Results are the same to the byte either way (tests/test_compiled.py compares a sweep's files).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ENV = "SERVESIM_COMPILED"  # environment variable naming the build to use
ROOT = Path(__file__).resolve().parents[1]  # the checkout holding sim/ and policies/
DEFAULT_DIR = ROOT / ".compiled"  # where `scripts/compile.py` builds by default
MANIFEST = "manifest.json"  # in the build directory: interpreter and source hashes
MODULES = (  # the per-step path of the paged, chunked and iteration-level policies
    "sim.engine", "sim.request", "sim.executor", "sim.cost_executor", "sim.cost_model",
    "sim.run_ends", "sim.block_counter", "sim.block_manager", "sim.recorder",
    "sim.record_log", "sim.request_source", "sim.trace_rows", "sim.stage_model",
    "sim.stage_times", "sim.moe_cost", "sim.draft", "sim.overhead", "sim.timeouts",
    "sim.admission", "sim.kv_tiers", "sim.kv_moves",
    "policies.base", "policies.routing", "policies.paged", "policies.paged_decode",
    "policies.paged_instance", "policies.paged_prefix_jumps", "policies.prefix_caching",
    "policies.paged_classes", "policies.priority", "policies.speculative", "policies.swap",
    "policies.swap_space", "policies.kv_tiers", "policies.vllm", "policies.vllm_v1",
    "policies.sarathi", "policies.orca", "policies.disagg", "policies.disagg_pools",
)


class CompiledBuildError(ImportError):
    """SERVESIM_COMPILED names a build that cannot stand for the sources."""


def source_hash(path: Path) -> str:
    """SHA-256 of a source file's bytes."""
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


def check_build(build: Path, package: str, sources: Path) -> None:
    """CompiledBuildError unless `build` holds a current build of `package`'s modules."""
    manifest = build / MANIFEST
    redo = f"rebuild with `python scripts/compile.py --out {build}` or unset {ENV}"
    if not manifest.is_file():
        raise CompiledBuildError(f"{ENV}: no compiled build in {build} ({MANIFEST} missing); "
                                 f"{redo}")
    info = json.loads(manifest.read_text())
    if info.get("interpreter") != interpreter_tag():
        raise CompiledBuildError(f"{ENV}: the build in {build} is for "
                                 f"{info.get('interpreter')!r}, this is {interpreter_tag()!r}; "
                                 f"{redo}")
    for name, digest in sorted(info.get("modules", {}).items()):
        if name.rpartition(".")[0] != package:
            continue
        src = sources / f"{name.rpartition('.')[2]}.py"
        if not src.is_file() or source_hash(src) != digest:
            raise CompiledBuildError(f"{ENV}: the compiled build in {build} is stale: {src} "
                                     f"changed since it was built; {redo}")


def activate(package: str, path: list[str]) -> bool:
    """Put the requested build of `package` (its `__path__` is `path`) ahead of its sources;
    False when SERVESIM_COMPILED asks for none."""
    build = requested_dir()
    if build is None:
        return False
    sources = Path(path[-1])
    check_build(build, package, sources)
    path.insert(0, str(build / package))
    return True


def is_active() -> bool:
    """Whether `sim` runs from a compiled build (for reports and benchmarks)."""
    package = sys.modules.get("sim")
    return package is not None and len(package.__path__) > 1 and requested_dir() is not None
