"""A newcomer finds the everyday questions on the README's first screen, and its links resolve."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_SCREEN = 40  # lines

MUST_SHOW = [
    "pip install -e . && python -m experiments.run experiments/configs/quickstart.yaml",
    "bash scripts/test.sh",
    "--capacity", "slo:",  # the capacity / SLO question
    "docs/workloads.md",  # your own trace
    "cluster.model: path/to/config.json",  # your own model
    "cluster.gpu:", "docs/hardware.md",  # your own GPU
    "experiments/notebooks/",  # the notebook
    "docs/api.md",  # the Python API
]


def test_first_screen_answers_the_everyday_questions():
    head = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN])
    missing = [text for text in MUST_SHOW if text not in head]
    assert not missing, f"not in the README's first {FIRST_SCREEN} lines: {missing}"


def test_local_links_of_the_first_screen_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN]
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", "\n".join(text))
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert targets and not missing, missing
