"""CI regression on policy metrics against the committed baseline."""

import math

from experiments.regression import compare, load_baseline, run_canonical


def test_every_policy_matches_its_baseline():
    moved, missing = compare(load_baseline(), run_canonical(jobs=2))
    assert not missing, "\n".join(missing) + "\n(run python -m experiments.regression " \
                                             "--update-baselines after an intended change)"
    assert not moved, "\n".join(map(str, moved))


def test_compare_names_policy_metric_and_change():
    base = {"orca__rate1__seed0": {"mean_e2e_s": 2.0, "completed": 10.0},
            "gone__rate1__seed0": {"mean_e2e_s": 1.0}}
    fresh = {"orca__rate1__seed0": {"mean_e2e_s": 2.2, "completed": 10.0}}
    moved, missing = compare(base, fresh)
    assert missing == ["gone__rate1__seed0: no fresh run"]
    assert len(moved) == 1
    text = str(moved[0])
    assert "orca__rate1__seed0" in text and "mean_e2e_s" in text and "+10.000%" in text
    assert not compare(base, base)[0]
    assert math.isnan(float("nan"))
