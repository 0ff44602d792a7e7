"""The deployment search (experiments/search): enumeration, pruning, config errors, end to end."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.capacity.main import CapacityExperiment
from experiments.config.experiment import experiment_from_dict
from experiments.run import main as run_main
from experiments.search.candidates import enumerate_candidates
from experiments.search.config import search_from_dict
from experiments.search.main import main as search_main, run_search
from experiments.search.prune import screen
from experiments.search.space import space_from_dict
from sim.util.errors import ConfigError

TINY = {  # a 68M-parameter model, a few synthetic requests, rates up to 4 req/s
    "name": "tiny_search",
    "workload": {"synthetic": {"num_requests": 20, "lengths": "alpaca"}},
    "cluster": {"model": "llama-68m"},
    "slo": {"ttft_s": 1.0, "tpot_s": 0.2, "attainment": 0.9},
    "seeds": [0],
    "search": {"gpus": ["A10G"], "max_gpus": 2, "tensor_parallel": [1, 2],
               "disagg": {"ratios": ["1:1"]}},
    "capacity": {"min_rate": 1, "max_rate": 4, "rel_tol": 0.3, "probe_s": 0, "probe_kv": 0},
}


def with_(path: str, value: object, raw: dict | None = None) -> dict:
    """A copy of `raw` (TINY) with the dotted `path` set to `value`."""
    out = copy.deepcopy(TINY if raw is None else raw)
    node = out
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


# ---- enumeration ------------------------------------------------------------------------------
def test_enumeration_counts_and_labels():
    space = space_from_dict({"gpus": ["H100-80GB", "A100-80GB"], "max_gpus": 4,
                             "tensor_parallel": [1, 2, 4, 8], "schedulers": ["vllm", "sarathi"],
                             "max_num_seqs": [128, 256], "token_budget": [512],
                             "disagg": {"ratios": ["1:1", "1:2"], "prefill_tp": [1, 2]}})
    candidates, left_out = enumerate_candidates(space)
    colocated = [c for c in candidates if c.kind == "colocated"]
    disagg = [c for c in candidates if c.kind == "disagg"]
    assert len(colocated) == 2 * 3 * 2 * 2  # GPU x TP <= 4 x scheduler x max_num_seqs
    assert left_out == 2 * 2 * 2  # TP 8: over max_gpus
    assert len(disagg) == 2 * 2 * 2  # GPU x ratio x prefill TP (every unit <= 4 GPUs)
    by_label = {c.label: c for c in candidates}
    assert len(by_label) == len(candidates)
    vllm = by_label["H100x2_tp2_vllm_seqs128_tok512"]
    assert vllm.entry() == {"name": "vllm", "label": vllm.label,
                            "params": {"max_num_seqs": 128, "max_num_batched_tokens": 512},
                            "cluster": {"gpu": "H100-80GB", "num_instances": 1,
                                        "tensor_parallel": 2}}
    assert by_label["A100x4_tp4_sarathi_seqs256_tok512"].params == {"max_num_seqs": 256,
                                                                    "token_budget": 512}
    unit = by_label["A100x4_disagg_1P2D_ptp2_dtp1"]
    assert unit.num_gpus == 4 and unit.params["num_prefill"] == 1
    assert unit.cluster["instances"] == [{"tensor_parallel": 2, "count": 1},
                                         {"tensor_parallel": 1, "count": 2}]
    assert "H100x2_disagg_1P1D_tp1" in by_label


def test_pipeline_stages_multiply_an_instances_gpus_and_show_in_the_label():
    space = space_from_dict({"gpus": ["H100-80GB"], "max_gpus": 8, "tensor_parallel": [2, 4, 8],
                             "pipeline_parallel": [1, 2, 4]})
    candidates, left_out = enumerate_candidates(space)
    by_label = {c.label: c for c in candidates}
    assert len(candidates) == 6 and left_out == 3  # TP x PP <= 8 of 3 x 3
    pp = by_label["H100x8_tp4_pp2_vllm"]
    assert pp.num_gpus == 8
    assert pp.entry()["cluster"] == {"gpu": "H100-80GB", "num_instances": 1,
                                     "tensor_parallel": 4, "pipeline_parallel": 2}
    assert "pipeline_parallel" not in by_label["H100x8_tp8_vllm"].entry()["cluster"]


def test_disaggregated_pools_may_run_pipelines():
    raw = with_("search", {"gpus": ["A10G"], "max_gpus": 4, "tensor_parallel": [1],
                           "disagg": {"ratios": ["1:1"], "prefill_pp": [1, 2]}})
    search = search_from_dict(raw, "x")
    units = [c for c in enumerate_candidates(search.space)[0] if c.kind == "disagg"]
    by_label = {c.label: c for c in units}
    assert set(by_label) == {"A10Gx2_disagg_1P1D_tp1", "A10Gx3_disagg_1P1D_tp1_ppp2_dpp1"}
    pipe = by_label["A10Gx3_disagg_1P1D_tp1_ppp2_dpp1"]
    assert pipe.params["num_prefill"] == 2  # the prefill pipeline's two virtual instances
    assert pipe.cluster["instances"][0] == {"tensor_parallel": 1, "count": 1,
                                            "pipeline_parallel": 2}
    assert screen(search, pipe, 100).pruned == ""


def test_a_pipeline_of_what_it_does_not_model_is_pruned_as_invalid():
    raw = with_("search", {"gpus": ["A10G"], "max_gpus": 2, "tensor_parallel": [1],
                           "pipeline_parallel": [2], "schedulers": ["vllm", "vanilla"]})
    search = search_from_dict(raw, "x")
    screened = {s.candidate.label: s for s in
                (screen(search, c, 100) for c in enumerate_candidates(search.space)[0])}
    assert screened["A10Gx2_tp1_pp2_vllm"].pruned == ""
    static = screened["A10Gx2_tp1_pp2_vanilla"]
    assert static.pruned == "invalid" and "static batches" in static.reason
    moe = search_from_dict(with_("cluster", {"model": "mixtral-8x7b"}, with_(
        "search", {"gpus": ["H100-80GB"], "max_gpus": 8, "tensor_parallel": [4],
                   "pipeline_parallel": [2]})), "x")
    only = screen(moe, enumerate_candidates(moe.space)[0][0], 100)
    assert only.pruned == "invalid" and "mixture-of-experts" in only.reason


def test_gpu_types_sharing_a_short_name_keep_their_full_names():
    space = space_from_dict({"gpus": ["A100-40GB", "A100-80GB"], "max_gpus": 1,
                             "tensor_parallel": [1]})
    labels = [c.label for c in enumerate_candidates(space)[0]]
    assert labels == ["A100-40GBx1_tp1_vllm", "A100-80GBx1_tp1_vllm"]


# ---- pruning ----------------------------------------------------------------------------------
def test_a_70b_model_on_one_80gb_gpu_is_pruned_for_memory():
    raw = with_("cluster", {"model": "llama-3.1-70b"})
    raw["search"] = {"gpus": ["H100-80GB"], "max_gpus": 4, "tensor_parallel": [1, 2, 4],
                     "disagg": {"ratios": ["1:1"]}}
    search = search_from_dict(raw, "x")
    screened = {s.candidate.label: s for s in
                (screen(search, c, 1000) for c in enumerate_candidates(search.space)[0])}
    one = screened["H100x1_tp1_vllm"]
    assert one.pruned == "memory" and "weights need" in one.reason and "TP=1" in one.reason
    assert screened["H100x2_disagg_1P1D_tp1"].pruned == "memory"
    assert screened["H100x4_tp4_vllm"].pruned == "" and screened["H100x4_tp4_vllm"].bounds


def test_a_zero_load_latency_bound_past_the_slo_prunes():
    raw = with_("slo", {"ttft_s": 1e-5, "tpot_s": 10.0, "attainment": 0.9})
    search = search_from_dict(raw, "x")
    first = enumerate_candidates(search.space)[0][0]
    screened = screen(search, first, 500)
    assert screened.pruned == "slo_bound" and "slo.ttft_s" in screened.reason
    assert screened.bounds.ttft_s > 1e-5 and screened.bounds.tpot_s < 10.0
    tpot = search_from_dict(with_("slo", {"ttft_p90_s": 10.0, "tbt_p99_s": 1e-6}), "x")
    out = screen(tpot, first, 500)
    assert out.pruned == "slo_bound" and "slo.tbt_p99_s" in out.reason
    assert "slo.ttft" not in out.reason
    loose = screen(search_from_dict(TINY, "x"), first, 500)
    assert loose.pruned == "" and loose.bounds.ttft_s < 1.0


# ---- config errors ----------------------------------------------------------------------------
@pytest.mark.parametrize("path, value, field", [
    ("search.tensor_parallel", [1, 2, 0], "search.tensor_parallel[2]"),
    ("search.tensor_parallel", [1, 1], "search.tensor_parallel[1]"),
    ("search.pipeline_parallel", [1, True], "search.pipeline_parallel[1]"),
    ("search.disagg.prefill_pp", [0], "search.disagg.prefill_pp[0]"),
    ("search.disagg.decode_pp", [2, 2], "search.disagg.decode_pp[1]"),
    ("cluster.pipeline_parallel", 2, "cluster.pipeline_parallel"),
    ("capacity.early_stop", "yes", "capacity.early_stop"),
    ("search.gpus", ["A10G", "nope"], "search.gpus[1]"),
    ("search.gpus", [], "search.gpus"),
    ("search.max_gpus", 0, "search.max_gpus"),
    ("search.max_gpus", 2.5, "search.max_gpus"),
    ("search.schedulers", ["vllm", "disagg"], "search.schedulers[1]"),
    ("search.schedulers", ["nope"], "search.schedulers[0]"),
    ("search.max_num_seqs", [64, -1], "search.max_num_seqs[1]"),
    ("search.disagg.ratios", ["1:1", "2-1"], "search.disagg.ratios[1]"),
    ("search.disagg.ratios", ["0:1"], "search.disagg.ratios[0]"),
    ("search.disagg.prefill_tp", [0], "search.disagg.prefill_tp[0]"),
    ("search.disagg.link", "carrier_pigeon", "search.disagg.link"),
    ("search.target_rate", -1, "search.target_rate"),
    ("search.colour", 1, "search.colour"),
    ("cluster.gpu", "H100-80GB", "cluster.gpu"),
    ("cluster.tensor_parallel", 2, "cluster.tensor_parallel"),
    ("capacity.min_rate", 0, "capacity.min_rate"),
    ("capacity.probe_s", -1, "capacity.probe_s"),
    ("capacity.speed", 1, "capacity.speed"),
    ("name", "../up", "name"),
])
def test_bad_values_are_named(path, value, field):
    with pytest.raises(ConfigError) as err:
        search_from_dict(with_(path, value), "x")
    assert err.value.field == field


def test_a_cap_no_scheduler_has_is_refused():
    raw = with_("search.schedulers", ["orca"])
    with pytest.raises(ConfigError, match="none of the schedulers") as err:
        search_from_dict(with_("search.max_num_seqs", [8], raw), "x")
    assert err.value.field == "search.max_num_seqs"


def test_a_search_needs_an_slo_and_a_space():
    raw = copy.deepcopy(TINY)
    del raw["slo"]
    with pytest.raises(ConfigError, match="latency targets"):
        search_from_dict(raw, "x")
    raw = copy.deepcopy(TINY)
    del raw["search"]
    with pytest.raises(ConfigError) as err:
        search_from_dict(raw, "x")
    assert err.value.field == "search"


# ---- end to end -------------------------------------------------------------------------------
def test_end_to_end_search_writes_its_outputs_and_resumes(tmp_path, capsys):
    search = search_from_dict(with_("search.target_rate", 10), "tiny_search")
    out = tmp_path / "out"
    done = run_search(search, out, progress=False)
    rows = pd.read_csv(out / "search.csv")
    assert sorted(rows["label"]) == ["A10Gx1_tp1_vllm", "A10Gx2_disagg_1P1D_tp1",
                                     "A10Gx2_tp2_vllm"]
    assert (rows["status"] == "simulated").all() and list(rows["rank"]) == [1, 2, 3]
    assert (rows["capacity_rps"] > 0).all()
    assert (rows["replicas"] == [math.ceil(10 / c) for c in rows["capacity_rps"]]).all()
    assert (rows["total_usd_per_hour"].diff().dropna() >= 0).all()  # ranked by $ / hour
    assert (out / "pareto.png").stat().st_size > 0 and (out / "search.json").is_file()
    for label in rows["label"]:
        raw = yaml.safe_load((out / "configs" / f"{label}.yaml").read_text(encoding="utf-8"))
        cfg = experiment_from_dict(raw, label)
        assert cfg.policies[0].label == label and cfg.request_rates
        experiment_from_dict(raw, label, cls=CapacityExperiment)
    one = out / "configs" / "A10Gx2_disagg_1P1D_tp1.yaml"
    assert run_main([str(one), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert len(pd.read_csv(tmp_path / "run" / "summary.csv")) == 1
    again = run_search(search, out, progress=False)
    assert [r["capacity_rps"] for r in again["rows"]] == [r["capacity_rps"] for r in
                                                          done["rows"]]
    assert "3 reused" in again["lines"][0]
    assert len(list((out / "capacity").glob("part-*"))) == 1  # nothing left to run


def test_command_line_prints_the_table_and_counts_the_pruned(tmp_path, capsys):
    raw = with_("search.tensor_parallel", [1])
    raw["search"]["disagg"] = None
    raw["cluster"] = {"model": "llama-2-13b"}  # fp16: 26 GB on a 24 GB A10G
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert search_main([str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "1 memory" in text and "0 simulated" in text
    rows = pd.read_csv(tmp_path / "o" / "search.csv")
    assert list(rows["pruned"]) == ["memory"] and "weights need" in rows["reason"][0]
    assert search_main([str(path), "--set", "search.max_gpus=0", "--out",
                        str(tmp_path / "o")]) == 2
    assert "search.max_gpus" in capsys.readouterr().err


def test_servesim_search_is_a_subcommand():
    from experiments import cli

    assert cli.SUBCOMMANDS["search"].module == "experiments.search.main"


def test_resume_ignores_a_changed_candidate(tmp_path):
    search = search_from_dict(with_("search.tensor_parallel", [1], with_("search.disagg",
                                                                         None)), "tiny")
    out = tmp_path / "o"
    run_search(search, out, progress=False)
    changed = search_from_dict(with_("search.tensor_parallel", [1], with_(
        "search.disagg", None, with_("capacity.rel_tol", 0.2))), "tiny")
    again = run_search(changed, out, progress=False)
    assert "reused" not in again["lines"][0]
    assert len(list((out / "capacity").glob("part-*"))) == 2
    assert Path(again["out"]) == out.resolve()


def test_a_changed_simulator_or_trace_changes_the_fingerprint(monkeypatch):
    import experiments.search.resume as resume

    search = search_from_dict(TINY, "x")
    first = enumerate_candidates(search.space)[0][0]
    before = resume.fingerprint(search, first)
    monkeypatch.setattr(resume, "simulator_version", lambda: "0.1.0+src.edited")
    assert resume.fingerprint(search, first) != before
    assert resume.trace_content(search) is None  # a synthetic workload: no file to read
