"""Build the compiled hot modules (sim/compiled.py) with Cython: the same sources, compiled.

    pip install -e ".[fast]"            # Cython (a C compiler and Python headers are needed)
    python scripts/compile.py [--out DIR] [--jobs N]
    SERVESIM_COMPILED=1 python -m experiments.run CONFIG     # runs the compiled build

The modules of `sim.compiled.MODULES` are compiled from copies of their sources with Python
semantics kept: type annotations are not used as C types (`annotation_typing=False`), and
`-ffp-contract=off` keeps the C compiler from fusing a multiply and an add (which would change
float results on CPUs with FMA). The build directory gets one folder per package with the
extension modules and `manifest.json` (interpreter, Cython version, each source's SHA-256), which
`sim.compiled.activate` checks: editing a source makes the build stale until it is rebuilt.
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

from sim.compiled import DEFAULT_DIR, MANIFEST, MODULES, interpreter_tag, source_hash  # noqa: E402

COMPILE_ARGS = ["-O2", "-ffp-contract=off"]  # no FMA contraction: the same floats as Python
DIRECTIVES = {"language_level": 3, "annotation_typing": False}


def stage(tmp: Path) -> list[tuple[str, Path]]:
    """Copy each module's source into `tmp` (with empty package __init__ files)."""
    staged = []
    for name in MODULES:
        package, _, module = name.rpartition(".")
        (tmp / package).mkdir(exist_ok=True)
        (tmp / package / "__init__.py").touch()
        dst = tmp / package / f"{module}.py"
        shutil.copyfile(ROOT / package / f"{module}.py", dst)
        staged.append((name, dst))
    return staged


def build(out: Path, jobs: int) -> dict:
    """Compile `MODULES` into `out`; returns the manifest written there."""
    try:
        from Cython import __version__ as cython_version
        from Cython.Build import cythonize
    except ImportError as e:
        raise SystemExit("Cython is not installed: pip install -e '.[fast]'") from e
    from setuptools import Distribution, Extension

    with tempfile.TemporaryDirectory(prefix="servesim-compile-") as t:
        tmp = Path(t)
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
        if out.exists():
            shutil.rmtree(out)
        for name, _ in staged:
            package, _, module = name.rpartition(".")
            (out / package).mkdir(parents=True, exist_ok=True)
            for so in (tmp / "lib" / package).glob(f"{module}.*"):
                shutil.copyfile(so, out / package / so.name)
    manifest = {"interpreter": interpreter_tag(), "cython": cython_version,
                "compile_args": COMPILE_ARGS, "directives": DIRECTIVES,
                "modules": hashes}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR, help="build directory")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error(f"--jobs={args.jobs}: must be >= 1")
    t0 = time.perf_counter()
    manifest = build(args.out.resolve(), args.jobs)
    print(f"compiled {len(manifest['modules'])} modules with Cython {manifest['cython']} into "
          f"{args.out} in {time.perf_counter() - t0:.0f} s; use them with SERVESIM_COMPILED="
          f"{'1' if args.out.resolve() == DEFAULT_DIR else args.out}")


if __name__ == "__main__":
    main()
