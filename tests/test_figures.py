"""Doc figures (experiments/figures/): the registry, `--list`, and one page run and drawn end to
end on a tiny workload."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import cli as servesim
from experiments.figures import FigurePage, PAGE_MODULES, main, pages
from experiments.figures.page import ROOT

TINY = ["--set", "workload={synthetic: {num_requests: 20}}", "--set", "request_rates=[2]",
        "--set", "seeds=[0]", "--no-progress"]  # any page's configs on 20 synthetic requests


def test_every_page_has_its_configs_and_a_doc_naming_its_command():
    found = pages()
    assert set(found) == set(PAGE_MODULES) == {
        "classes", "kv_tiers", "length_aware", "magnus", "overhead", "policies", "prefix_cache",
        "rolling_batch", "speculative"}
    for name, page in found.items():
        assert isinstance(page, FigurePage) and page.name == name
        assert all(path.is_file() and path.suffix == ".yaml" for path in page.config_paths())
        assert len(set(page.configs)) == len(page.configs)
        doc = (ROOT / page.doc).read_text(encoding="utf-8")
        assert f"experiments.figures {name}" in doc, f"{page.doc} should show how to draw it"
    assert found["policies"].configs == ()  # it simulates its own scenarios


def test_results_go_to_a_folder_per_config_stem(tmp_path):
    page = pages()["overhead"]
    assert page.results_dirs(tmp_path) == [tmp_path / "overhead",
                                           tmp_path / "overhead_per_request"]


def test_list_names_every_page_doc_and_config(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for page in pages().values():
        line = next(row for row in out.splitlines() if row.startswith(page.name + " "))
        assert page.doc in line
        assert all(config in out for config in page.configs)
    assert "no config" in out


def test_unknown_page_or_none_is_a_usage_error(capsys):
    for argv in (["nope"], []):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert "unknown page" in capsys.readouterr().err


def test_draw_only_without_results_is_status_2(tmp_path, capsys):
    assert main(["rolling_batch", "--draw-only", "--results", str(tmp_path)]) == 2
    assert "no summary.csv" in capsys.readouterr().err


def test_a_page_runs_its_configs_then_draws_and_a_second_call_reuses_the_runs(tmp_path, capsys):
    results, figures = tmp_path / "results", tmp_path / "figures"
    argv = ["overhead", "--results", str(results), "--out", str(figures), *TINY]
    assert servesim.main(["figures", *argv]) == 0
    out = capsys.readouterr().out
    assert {p.name for p in figures.iterdir()} == {"overhead_vs_rate.png",
                                                    "overhead_vs_per_request.png"}
    assert (results / "overhead" / "summary.csv").is_file()
    assert (results / "overhead_per_request" / "summary.csv").is_file()
    assert "| label | rate | GPU busy |" in out and "| mode | per_request_us |" in out
    assert main(argv) == 0  # every run is on disk: reused, drawn again
    assert "already finished: skipped" in capsys.readouterr().out
