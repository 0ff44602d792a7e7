"""Doc figures: one module per docs page (experiments/figures/<page>.py, each defining
`PAGE = FigurePage(...)`), one registry (registry.py) and one command:

    python -m experiments.figures --list
    python -m experiments.figures magnus [--results results] [--out docs/figures] [--jobs 2]
    servesim figures magnus --draw-only
"""

from experiments.figures.cli import main
from experiments.figures.page import FigurePage
from experiments.figures.registry import PAGE_MODULES, page, pages

__all__ = ["FigurePage", "PAGE_MODULES", "main", "page", "pages"]
