"""Every docs page with figures, by name; each page's module is imported only when asked for.

    PAGE_MODULES["magnus"] = "experiments.figures.magnus"  (whose PAGE is a FigurePage)
"""

from __future__ import annotations

import importlib

from experiments.figures.page import FigurePage

PAGE_MODULES: dict[str, str] = {  # page name -> module defining PAGE (docs/<page>.md)
    "classes": "experiments.figures.classes",
    "kv_tiers": "experiments.figures.kv_tiers",
    "length_aware": "experiments.figures.length_aware",
    "magnus": "experiments.figures.magnus",
    "overhead": "experiments.figures.overhead",
    "policies": "experiments.figures.policies",
    "prefix_cache": "experiments.figures.prefix_cache",
    "rolling_batch": "experiments.figures.rolling_batch",
    "speculative": "experiments.figures.speculative",
}


def page(name: str) -> FigurePage:
    """The page called `name`; KeyError (listing the pages) when there is none."""
    if name not in PAGE_MODULES:
        raise KeyError(f"no figure page {name!r}; pages: {', '.join(PAGE_MODULES)}")
    found = importlib.import_module(PAGE_MODULES[name]).PAGE
    if not isinstance(found, FigurePage) or found.name != name:
        raise TypeError(f"{PAGE_MODULES[name]}.PAGE is not the FigurePage {name!r}")
    return found


def pages() -> dict[str, FigurePage]:
    """Every page, by name, in PAGE_MODULES' order."""
    return {name: page(name) for name in PAGE_MODULES}
