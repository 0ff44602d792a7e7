"""Build the compiled hot modules (sim/compiled.py) with Cython: the same sources, compiled.

    pip install -e ".[fast]"            # Cython (a C compiler and Python headers are needed)
    python scripts/compile.py [--out DIR] [--jobs N]
    SERVESIM_COMPILED=1 python -m experiments.run CONFIG     # runs the compiled build

The modules of `sim.compiled.MODULES` are compiled from copies of their sources with Python
semantics kept: type annotations are not used as C types (`annotation_typing=False`), and
`-ffp-contract=off` keeps the C compiler from fusing a multiply and an add (which would change
float results on CPUs with FMA). The build directory gets one folder per package with the
extension modules, `manifest.json` (interpreter, Cython version, each source's SHA-256, each
extension file's name and SHA-256), which `sim.compiled.activate` checks (editing a source makes
the build stale until it is rebuilt; a file the manifest does not list is refused), and the
marker file `.servesim-build`. `--out` is written only when it does not exist, is an empty
folder, or carries that marker (an earlier build, replaced whole); any other path is refused by
name before anything is compiled, so a folder of your files is never emptied.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.pop("SERVESIM_COMPILED", None)  # import the sources, whatever build is there

from sim.compiled import (DEFAULT_DIR, MANIFEST, MARKER, MARKER_TEXT, MODULES,  # noqa: E402
                          interpreter_tag, source_hash)

COMPILE_ARGS = ["-O2", "-ffp-contract=off"]  # no FMA contraction: the same floats as Python
DIRECTIVES = {"language_level": 3, "annotation_typing": False}


def stage(tmp: Path) -> list[tuple[str, Path]]:
    """Copy each module's source into `tmp` (with empty package __init__ files)."""
    staged = []
    for name in MODULES:
        package, _, module = name.rpartition(".")
        parts = package.split(".")
        for depth in range(1, len(parts) + 1):  # sim/, sim/engine/, ...: package folders
            tmp.joinpath(*parts[:depth]).mkdir(exist_ok=True)
            tmp.joinpath(*parts[:depth], "__init__.py").touch()
        dst = tmp.joinpath(*parts, f"{module}.py")
        shutil.copyfile(ROOT.joinpath(*parts, f"{module}.py"), dst)
        staged.append((name, dst))
    return staged


def out_problem(out: Path) -> str:
    """Why `out` may not be written ("" when it may): it must not exist, or be an empty
    folder, or a folder carrying the build's marker file (an earlier build)."""
    if not out.exists() and not out.is_symlink():
        return ""
    if not out.is_dir():
        return "exists and is not a folder"
    marker = out / MARKER
    if marker.is_file() and not marker.is_symlink():
        try:
            if marker.read_text(encoding="utf-8") == MARKER_TEXT:
                return ""
        except (OSError, UnicodeDecodeError):
            pass
    if not any(out.iterdir()):
        return ""
    return (f"holds files and is not a servesim build (no {MARKER} marker file); nothing "
            f"there is replaced: choose a new folder or remove it yourself")


def compile_modules(tmp: Path, jobs: int) -> tuple[list[tuple[str, Path]], dict[str, str]]:
    """Stage and compile MODULES in `tmp`: (staged sources, source SHA-256 by module)."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    staged = stage(tmp)
    hashes = {name: source_hash(src) for name, src in staged}  # of what is compiled
    cwd = os.getcwd()
    os.chdir(tmp)  # module names follow the staged packages
    try:
        exts = cythonize([Extension(name, [str(src.relative_to(tmp))],
                                    extra_compile_args=COMPILE_ARGS)
                          for name, src in staged],
                         compiler_directives=DIRECTIVES, nthreads=jobs, quiet=True)
        dist = Distribution({"ext_modules": exts, "script_name": "compile.py"})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib, cmd.build_temp, cmd.parallel = "lib", "tmp", jobs
        cmd.ensure_finalized()
        cmd.run()
    finally:
        os.chdir(cwd)
    return staged, hashes


def assemble(tmp: Path, staged: list[tuple[str, Path]], dest: Path) -> dict[str, dict]:
    """Copy each module's one extension file into `dest`: {module: {file, sha256}}."""
    binaries = {}
    for name, _ in staged:
        package, _, module = name.rpartition(".")
        folder = Path(*package.split("."))
        (dest / folder).mkdir(parents=True, exist_ok=True)
        built = sorted((tmp / "lib" / folder).glob(f"{module}.*"))
        if len(built) != 1:
            raise SystemExit(f"compiling {name} gave {len(built)} files, not one: "
                             f"{[p.name for p in built]}")
        shutil.copyfile(built[0], dest / folder / built[0].name)
        binaries[name] = {"file": built[0].name, "sha256": source_hash(built[0])}
    return binaries


def build(out: Path, jobs: int) -> dict:
    """Compile `MODULES` into `out` (refused unless `out_problem` allows it, checked again just
    before an earlier build is replaced); returns the manifest written there."""
    why = out_problem(out)
    if why:
        raise SystemExit(f"--out {out}: {why}")
    try:
        from Cython import __version__ as cython_version
    except ImportError as e:
        raise SystemExit("Cython is not installed: pip install -e '.[fast]'") from e
    with tempfile.TemporaryDirectory(prefix="servesim-compile-") as t:
        tmp = Path(t)
        staged, hashes = compile_modules(tmp, jobs)
        new = tmp / "out"
        binaries = assemble(tmp, staged, new)
        manifest = {"interpreter": interpreter_tag(), "cython": cython_version,
                    "compile_args": COMPILE_ARGS, "directives": DIRECTIVES,
                    "modules": hashes, "binaries": binaries}
        (new / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        (new / MARKER).write_text(MARKER_TEXT, encoding="utf-8")
        why = out_problem(out)  # again: it may have changed while compiling
        if why:
            raise SystemExit(f"--out {out}: {why}")
        if out.exists():
            shutil.rmtree(out)  # an empty folder, or an earlier build (its marker)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(new, out)
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR, help="build directory")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error(f"--jobs={args.jobs}: must be >= 1")
    why = out_problem(args.out.resolve())
    if why:
        ap.error(f"--out {args.out}: {why}")
    t0 = time.perf_counter()
    manifest = build(args.out.resolve(), args.jobs)
    print(f"compiled {len(manifest['modules'])} modules with Cython {manifest['cython']} into "
          f"{args.out} in {time.perf_counter() - t0:.0f} s; use them with SERVESIM_COMPILED="
          f"{'1' if args.out.resolve() == DEFAULT_DIR else args.out}")


if __name__ == "__main__":
    main()
