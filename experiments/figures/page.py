"""What one docs page's figures need, declared as data: `FigurePage`.

Each page module of experiments/figures/ (one per docs/*.md page with figures) defines
`PAGE = FigurePage(...)`; experiments/figures/registry.py collects them and
`python -m experiments.figures` runs their configs and calls their draw functions.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]  # the repository: configs and docs are relative to it
# (results folder per config, figure folder) -> the files written
Draw = Callable[[list[Path], Path], list[Path]]


@dataclass(frozen=True)
class FigurePage:
    """One docs page: the sweeps it is drawn from and the function drawing it."""

    name: str  # key on the command line, e.g. "magnus"
    doc: str  # the page its figures illustrate, relative to the repository, e.g. docs/magnus.md
    configs: tuple[str, ...]  # experiments/configs/*.yaml run into RESULTS/<stem>, in this order
    draw: Draw  # draws the figures into the figure folder, prints the page's tables
    summary: str = ""  # one line for --list

    def __post_init__(self) -> None:
        if not self.name or not self.doc:
            raise ValueError(f"FigurePage {self.name!r}: name and doc are required")

    def config_paths(self) -> list[Path]:
        """The configs as absolute paths (they are named relative to the repository)."""
        return [ROOT / config for config in self.configs]

    def results_dirs(self, results: Path) -> list[Path]:
        """RESULTS/<config stem> for each config, where experiments.run writes it."""
        return [results / Path(config).stem for config in self.configs]


def sweeps_run(results: list[Path]) -> dict[str, Path]:
    """The result folders (by name) whose sweep has been run; the others are reported skipped."""
    found = {folder.name: folder for folder in results if (folder / "summary.csv").is_file()}
    for folder in results:
        if folder.name not in found:
            print(f"skipped {folder.name}: not run", file=sys.stderr)
    return found
