"""The Python API example in docs/api.md runs as written (from a copy of the repo layout)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def code_blocks(text: str) -> list[str]:
    """The ```python blocks of a markdown page, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_docs_api_example_runs(tmp_path, monkeypatch, capsys):
    blocks = code_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 2
    config = tmp_path / "experiments" / "configs" / "quickstart.yaml"
    config.parent.mkdir(parents=True)
    shutil.copy(ROOT / "experiments" / "configs" / "quickstart.yaml", config)
    monkeypatch.chdir(tmp_path)  # the paths in the example are relative to the repo root
    namespace: dict = {"__name__": "api_example"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    table, summary = namespace["table"], namespace["summary"]
    assert list(table.index) == ["orca", "vllm"] and (table["request_throughput"] > 0).all()
    assert len(summary) == 4 and set(summary["rate"]) == {1, 2}
    assert len(namespace["records"]) == 300 and len(namespace["steps"]) > 0
    assert (tmp_path / "results" / "api_example" / "summary.csv").is_file()
    assert "request_throughput" in capsys.readouterr().out


def test_code_blocks_are_extracted():
    text = "x\n```python\na = 1\n```\n```bash\nls\n```\n```python\nb = 2\n```\n"
    assert code_blocks(text) == ["a = 1\n", "b = 2\n"]
