"""The installed `servesim` command (experiments/cli.py), called in-process."""

import pytest

from experiments import cli


def test_list_prints_the_catalogue(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "Policies:" in out and "GPUs:" in out


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_each_subcommand_help_shows_examples_and_exits_0(name, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([name, "--help"])
    assert exc.value.code in (0, None)
    out = capsys.readouterr().out
    assert "examples:" in out and f"servesim {name}" in out
    if name != "list":
        assert "usage:" in out  # the module's own options follow the examples


def test_top_level_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in cli.SUBCOMMANDS)


def test_unknown_or_missing_subcommand_is_status_2(capsys):
    assert cli.main(["nope"]) == 2
    assert "unknown subcommand 'nope'" in capsys.readouterr().err
    assert cli.main([]) == 2


def test_arguments_are_forwarded_unchanged(monkeypatch):
    seen = []
    monkeypatch.setattr("experiments.report.plot.main", lambda argv: seen.append(argv) or 0)
    assert cli.main(["plot", "results/x", "--rate", "3"]) == 0
    assert seen == [["results/x", "--rate", "3"]]
