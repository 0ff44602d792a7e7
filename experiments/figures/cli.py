"""Draw a docs page's figures, running its sweeps first where their results are missing or stale.

    python -m experiments.figures --list
    python -m experiments.figures PAGE [PAGE ...] [--results DIR] [--out DIR] [--jobs N]
                                  [--draw-only] [--no-progress] [--set KEY=VALUE ...]

Each config of a page runs into RESULTS/<config stem> through experiments.run (the same as
`python -m experiments.run CONFIG --out RESULTS/<stem>`): finished runs whose identity matches
are reused (experiments/files/resume.py), so a second call only draws. Then the page's draw function
writes its figures into OUT and prints its tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from experiments.figures.page import FigurePage
from experiments.figures.registry import PAGE_MODULES, pages

ALL = "all"  # the page name meaning every page


def listing(found: dict[str, FigurePage]) -> str:
    """Every page: its name, doc and summary, then its configs one per line."""
    width = max(map(len, found))
    doc_width = max(len(page.doc) for page in found.values())
    lines = []
    for name, page in found.items():
        lines.append(f"{name:<{width}}  {page.doc:<{doc_width}}  {page.summary}".rstrip())
        lines += [f"{'':<{width}}    {config}" for config in page.configs] or [
            f"{'':<{width}}    (no config: its draw function runs its own simulations)"]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.figures",
        description="Run the sweeps of docs pages (missing or stale runs only) and draw their "
                    "figures.", epilog="pages: " + ", ".join(PAGE_MODULES) + f", or {ALL}")
    parser.add_argument("pages", nargs="*", metavar="PAGE", help="page names (see --list)")
    parser.add_argument("--list", action="store_true", help="list pages, configs and docs")
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="each config runs into RESULTS/<config stem> (default: results)")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"),
                        help="folder for the figures (default: docs/figures)")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="runs in parallel per sweep (default 1)")
    parser.add_argument("--draw-only", action="store_true",
                        help="run nothing: draw from the results on disk")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field of every config run, as "
                        "experiments.run --set (e.g. max_requests=50 for a quick look); "
                        "repeatable")
    args = parser.parse_args(argv)
    if not args.list and not args.pages:
        parser.error("name at least one PAGE (or --list)")
    unknown = [p for p in args.pages if p not in PAGE_MODULES and p != ALL]
    if unknown:
        parser.error(f"unknown page(s) {', '.join(unknown)}; pages: {', '.join(PAGE_MODULES)}")
    return args


def run_configs(page: FigurePage, args: argparse.Namespace) -> int:
    """Run each of the page's configs into RESULTS/<stem>; the first non-zero status, else 0."""
    from experiments.run import main as run_main

    for config, out in zip(page.config_paths(), page.results_dirs(args.results)):
        print(f"{page.name}: {config.name} -> {out}", flush=True)
        status = run_main([str(config), "--out", str(out), "--jobs", str(args.jobs),
                           *(["--no-progress"] if args.no_progress else []),
                           *(f"--set={override}" for override in args.overrides)])
        if status:
            return status
    return 0


def draw_page(page: FigurePage, results: Path, out: Path) -> int:
    """Call the page's draw function; 2 with a message when its results are missing or off."""
    try:
        written = page.draw(page.results_dirs(results), out)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        print(f"error: {page.name}: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    found = pages()
    if args.list:
        print(listing(found))
        return 0
    names = list(found) if ALL in args.pages else list(dict.fromkeys(args.pages))
    for name in names:
        if not args.draw_only:
            status = run_configs(found[name], args)
            if status:
                return status
        print(f"\n{name} ({found[name].doc}):", flush=True)
        status = draw_page(found[name], args.results, args.out)
        if status:
            return status
    return 0
