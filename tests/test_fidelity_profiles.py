"""Profile ingest, the profile-table cost model, the roofline stage adapter, the fidelity report.

Small fixture tables are written here; the shared A100 data is used only where present."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.core.step_shape import shape_from_sums
from sim.cost.cost_model import DeploymentSpec, RooflineCostModel
from sim.cost.roofline_stages import RooflineStages
from sim.cost.stage_compose import ComposedCostModel
from sim.hardware.gpus import get_gpu
from sim.measured.profile_cost_model import ALLREDUCE_LAUNCH_S, ProfileCostModel, ProfileStageTimes
from sim.measured.profile_csv import ProfileWarning
from sim.measured.profile_tables import DENSE_OPS, load_profiles
from sim.measured.table_interp import LogLogCurve, ScatterGrid
from sim.models.catalog import get_model
from sim.util.errors import ConfigError, TraceError
from traces.paths import default_data_dir

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128)  # fixture dense num_tokens
MODEL_DIR = ("meta-llama", "Llama-2-7b-hf")  # fixture model folder (an alias of llama-2-7b)
SHARED = default_data_dir() / "profiles"


def op_ms(op_index: int, tokens: int, tp: int) -> float:
    """Fixture op time (ms): a fixed cost plus work that grows with tokens, divided by TP."""
    return 0.01 * (op_index + 1) + 0.001 * tokens * (op_index + 1) / tp


def dense_frame(ops=DENSE_OPS, tps=(1, 2), extra: dict | None = None) -> pd.DataFrame:
    rows = []
    for tp in tps:
        for n in TOKENS:
            row = {f"time_stats.{op}.median": op_ms(i, n, tp) for i, op in enumerate(ops)}
            row["time_stats.emb.median"] = 0.001 * n
            row.update({"n_embd": 4096, "num_tokens": n, "num_tensor_parallel_workers": tp})
            row.update(extra or {})
            rows.append(row)
    return pd.DataFrame(rows)


def attention_frame() -> pd.DataFrame:
    rows = [{"is_prefill": True, "batch_size": 1, "prefill_chunk_size": c, "kv_cache_size": 0,
             "time_stats.attn_prefill.median": 1e-5 * c * c, "time_stats.attn_decode.median": ""}
            for c in (64, 256, 1024)]
    rows += [{"is_prefill": False, "batch_size": b, "prefill_chunk_size": 0, "kv_cache_size": k,
              "time_stats.attn_prefill.median": "",
              "time_stats.attn_decode.median": 0.01 + 1e-5 * b * k}
             for b in (1, 4, 16) for k in (128, 1024)]
    frame = pd.DataFrame(rows)
    frame["num_tensor_parallel_workers"] = 1
    return frame


def network_frame() -> pd.DataFrame:
    sizes = [2 ** k for k in range(11, 26)]
    rows = [{"time_stats.all_reduce.median": 0.02 + s / 1e8 * (2 if dpn == 1 else 1),
             "rank": 0, "num_workers": 2, "size": s, "collective": "all_reduce",
             "devices_per_node": dpn} for s in sizes for dpn in (1, 2)]
    return pd.DataFrame(rows)


def write_tree(root: Path, compute_level: bool = False, dense: pd.DataFrame | None = None
               ) -> Path:
    """A Vidur-layout tree under root: shared layout, or Vidur's compute/ + network/."""
    base = root / "compute" / "a100" if compute_level else root / "a100"
    model_dir = base.joinpath(*MODEL_DIR)
    model_dir.mkdir(parents=True)
    (dense if dense is not None else dense_frame()).to_csv(model_dir / "mlp.csv", index=False)
    attention_frame().to_csv(model_dir / "attention.csv", index=False)
    net = root / "network" / "a100_dgx" if compute_level else base / "network"
    net.mkdir(parents=True)
    network_frame().to_csv(net / "all_reduce.csv")
    return root


# ---- ingest -------------------------------------------------------------------------------
@pytest.mark.parametrize("compute_level", [False, True])
def test_both_layouts_normalise_to_seconds(tmp_path, compute_level):
    t = load_profiles(write_tree(tmp_path, compute_level), model="llama-2-7b", gpu="A100-80GB")
    assert (t.gpu, t.model, t.tensor_parallel_degrees) == ("a100", "meta-llama/Llama-2-7b-hf",
                                                           (1, 2))
    row = t.dense[(t.dense.tp == 2) & (t.dense.num_tokens == 16)].iloc[0]
    expect = sum(op_ms(i, 16, 2) for i in range(len(DENSE_OPS))) * 1e-3
    assert row["seconds"] == pytest.approx(expect)
    assert row["emb_s"] == pytest.approx(16e-6)
    dec = t.attention[~t.attention.is_prefill]
    assert len(dec) == 6 and dec.seconds.min() == pytest.approx((0.01 + 1e-5 * 128) * 1e-3)
    assert set(t.network.num_workers) == {2} and len(t.network) == 15  # intra-node rows only


def test_model_folder_and_gpu_folder_paths(tmp_path):
    write_tree(tmp_path)
    by_gpu = load_profiles(tmp_path / "a100")
    by_model = load_profiles(tmp_path / "a100" / "meta-llama" / "Llama-2-7b-hf")
    assert len(by_gpu.dense) == len(by_model.dense) == 2 * len(TOKENS)
    assert len(by_model.network) == 15


def test_missing_op_column_names_it(tmp_path):
    dense = dense_frame().drop(columns=["time_stats.mlp_down_proj.median"])
    write_tree(tmp_path, dense=dense)
    with pytest.raises(TraceError, match="mlp_down_proj.median") as err:
        load_profiles(tmp_path)
    assert "mlp.csv" in str(err.value)


def test_unknown_op_warns_and_other_columns_are_ignored(tmp_path):
    dense = dense_frame(extra={"time_stats.mystery_op.median": 5.0, "hostname": "gpu7"})
    write_tree(tmp_path, dense=dense)
    with pytest.warns(ProfileWarning, match="mystery_op"):
        t = load_profiles(tmp_path)
    clean = load_profiles(write_tree(tmp_path / "clean"))
    pd.testing.assert_series_equal(t.dense["seconds"], clean.dense["seconds"])


def test_model_and_gpu_absent_name_those_present(tmp_path):
    write_tree(tmp_path)
    with pytest.raises(ConfigError, match="meta-llama/Llama-2-7b-hf") as err:
        load_profiles(tmp_path, model="llama-2-70b")
    assert err.value.field == "model"
    with pytest.raises(ConfigError, match="present: a100"):
        load_profiles(tmp_path, gpu="H100-80GB")


@pytest.mark.parametrize("text, reason", [("", "empty file"),
                                          ("num_tokens,num_tensor_parallel_workers\n",
                                           "no rows")])
def test_empty_files(tmp_path, text, reason):
    write_tree(tmp_path)
    (tmp_path / "a100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv").write_text(text)
    with pytest.raises(TraceError, match=reason):
        load_profiles(tmp_path)


def test_non_numeric_cell_names_row_field_value(tmp_path):
    dense = dense_frame().astype(object)
    dense.loc[3, "time_stats.add.median"] = "fast"
    write_tree(tmp_path, dense=dense)
    with pytest.raises(TraceError) as err:
        load_profiles(tmp_path)
    assert (err.value.row, err.value.field, err.value.value) == (5, "time_stats.add.median",
                                                                 "fast")


def test_attention_sample_layout(tmp_path):
    write_tree(tmp_path)
    path = tmp_path / "a100" / "meta-llama" / "Llama-2-7b-hf"
    (path / "attention.csv").unlink()
    pd.DataFrame({"is_prefill": [True, False], "batch_size": [1, 8],
                  "prefill_chunk_size": [128, 0], "kv_cache_size": [0, 512],
                  "time_stats.attn.median_ms": [0.05, 0.07]}).to_csv(
        path / "attention_sample.csv", index=False)
    t = load_profiles(tmp_path)
    assert t.attention.seconds.tolist() == pytest.approx([0.07e-3, 0.05e-3])
    assert set(t.attention.tp) == {1}


def test_bad_is_prefill_cell(tmp_path):
    write_tree(tmp_path)
    path = tmp_path / "a100" / "meta-llama" / "Llama-2-7b-hf" / "attention.csv"
    frame = attention_frame().astype(object)
    frame.loc[2, "is_prefill"] = "maybe"
    frame.to_csv(path, index=False)
    with pytest.raises(TraceError, match="is_prefill"):
        load_profiles(tmp_path)


def test_real_profile_csv_and_sidecar(tmp_path):
    from sim.measured.calibrated import FEATURES

    frame = pd.DataFrame([{"kind": "decode", **{f: 1.0 for f in FEATURES}, "seconds": 0.01}])
    path = tmp_path / "tiny_cpu.csv"
    frame.to_csv(path, index=False)
    path.with_suffix(".json").write_text(json.dumps({"model": {"name": "tiny"},
                                                     "device_name": "cpu"}))
    t = load_profiles(path)
    assert (t.model, t.gpu, len(t.steps)) == ("tiny", "cpu", 1)
    assert t.dense.empty and t.meta["device_name"] == "cpu"
    with pytest.raises(ConfigError, match="profiled tiny"):
        load_profiles(path, model="llama-2-7b")
    frame.drop(columns=["seconds"]).to_csv(path, index=False)
    with pytest.raises(TraceError, match="seconds"):
        load_profiles(path)


# ---- interpolation ------------------------------------------------------------------------
def test_loglog_curve_exact_monotone_and_outside():
    x, y = np.array([1.0, 10.0, 100.0]), np.array([1.0, 2.0, 50.0])
    curve = LogLogCurve(x, y)
    assert [curve(v) for v in x] == pytest.approx(y)
    grid = np.geomspace(1, 100, 200)
    vals = [curve(v) for v in grid]
    assert all(b >= a for a, b in zip(vals, vals[1:]))
    assert curve(math.sqrt(10)) == pytest.approx(math.sqrt(2))  # halfway in log-log
    assert curve(0.5) is None and curve(101) is None
    noisy = LogLogCurve(np.array([1.0, 2.0, 3.0]), np.array([5.0, 1.0, 2.0]))
    assert noisy(1.0) == pytest.approx(1.0)  # lower non-decreasing envelope


def test_scatter_grid_bilinear_exact_monotone():
    a = np.array([1, 1, 4, 4, 16])
    b = np.array([100, 1000, 100, 1000, 1000])
    t = 1.0 + a * b / 100.0
    grid = ScatterGrid(a, b, t)
    assert [grid(x, y) for x, y in zip(a, b)] == pytest.approx(t)
    assert grid(2, 550) == pytest.approx(1 + (2 * 550) / 100)  # bilinear is exact on a*b
    assert grid(10, 1000) == pytest.approx(1 + 10 * 1000 / 100)  # via the 4 and 16 rows
    assert grid(10, 500) is None and grid(32, 500) is None
    along_b = [grid(3, k) for k in np.linspace(100, 1000, 50)]
    along_a = [grid(x, 700) for x in np.linspace(1, 4, 50)]
    assert all(q >= p for s in (along_b, along_a) for p, q in zip(s, s[1:]))
    assert grid.nearest(32, 500)[:2] == (16, 1000)


def _fixture_model(tmp_path, tp=1, anchor=True):
    t = load_profiles(write_tree(tmp_path))
    dep = DeploymentSpec(get_model("llama-2-7b"), get_gpu("A100-80GB"), tp)
    fallback = RooflineStages(RooflineCostModel(dep))
    return t, fallback, ProfileStageTimes(t, tp, fallback, anchor=anchor)


def test_profile_stages_exact_on_table_points(tmp_path):
    t, _, st = _fixture_model(tmp_path, tp=2)
    for r in t.dense[t.dense.tp == 2].itertuples():
        assert st.dense_layer_s(r.num_tokens) == pytest.approx(r.seconds, rel=1e-12)
    net = t.network
    for r in net.itertuples():
        assert st.allreduce_s(r.size_bytes) == pytest.approx(r.seconds + ALLREDUCE_LAUNCH_S)
    _, _, st1 = _fixture_model(tmp_path / "tp1", tp=1)
    for r in t.attention.itertuples():
        got = (st1.attn_prefill_layer_s(r.chunk_tokens, r.kv_tokens) if r.is_prefill
               else st1.attn_decode_layer_s(r.batch_size, r.kv_tokens))
        assert got == pytest.approx(r.seconds, rel=1e-12)
    assert st1.allreduce_s(1e6) == 0.0


def test_profile_stages_monotone_between_points(tmp_path):
    _, _, st = _fixture_model(tmp_path)
    dense = [st.dense_layer_s(n) for n in range(1, 129)]
    decode = [st.attn_decode_layer_s(b, 600) for b in range(1, 17)]
    prefill = [st.attn_prefill_layer_s(c, 0) for c in range(64, 1025, 7)]
    assert all(q >= p for s in (dense, decode, prefill) for p, q in zip(s, s[1:]))


def test_fallback_outside_the_tables(tmp_path):
    t, fb, st = _fixture_model(tmp_path)
    edge = t.dense[(t.dense.tp == 1) & (t.dense.num_tokens == 128)].seconds.iloc[0]
    assert st.dense_layer_s(4096) == pytest.approx(fb.dense_layer_s(4096) * edge
                                                   / fb.dense_layer_s(128))
    _, fb, plain = _fixture_model(tmp_path / "plain", anchor=False)
    assert plain.dense_layer_s(4096) == fb.dense_layer_s(4096)
    assert plain.attn_decode_layer_s(64, 4000) == fb.attn_decode_layer_s(64, 4000)
    _, fb4, st4 = _fixture_model(tmp_path / "tp4", tp=4)  # no TP-4 rows at all
    assert st4.dense_layer_s(16) == fb4.dense_layer_s(16)
    assert st4.attn_decode_layer_s(4, 500) == fb4.attn_decode_layer_s(4, 500)
    assert st4.allreduce_s(4096.0) == fb4.allreduce_s(4096.0)


def test_prefill_after_context_uses_equal_pairs_chunk(tmp_path):
    _, _, st = _fixture_model(tmp_path)
    # 64 tokens after 480 cached: 64 * (480 + 32) pairs = 256^2 / 2 -> the 256-chunk row
    assert st.attn_prefill_layer_s(64, 480) == pytest.approx(1e-5 * 256 ** 2 * 1e-3)


# ---- step shapes and composition ----------------------------------------------------------
def _sums(chunks):
    n = [a for a, _ in chunks]
    c = [b for _, b in chunks]
    return (sum(n), sum(c), sum(a * b for a, b in chunks), sum(a * a for a in n), len(n))


@pytest.mark.parametrize("chunks, expect", [
    ([(1, 100)] * 8, (0, 0, 0, 8, 100)),
    ([(512, 0)], (1, 512, 0, 0, 0)),
    ([(256, 64)] * 3 + [(1, 900)] * 5, (3, 256, 64, 5, 900)),
    ([(128, 0)] * 4 + [(1, 10), (1, 30)], (4, 128, 0, 2, 20)),
])
def test_shape_from_sums_recovers_equal_chunk_batches(chunks, expect):
    s = shape_from_sums(*_sums(chunks))
    got = (s.num_prefill, s.chunk_tokens, s.prefill_context, s.num_decode, s.decode_kv)
    assert got == pytest.approx(expect)


def test_roofline_stages_by_hand():
    dep = DeploymentSpec(get_model("llama-2-7b"), get_gpu("A100-80GB"), 1)
    st = RooflineStages(RooflineCostModel(dep))
    params = 4 * 4096 * 4096 + 3 * 4096 * 11008  # weights of one layer
    moved = 2 * params + 10 * 4096 * 2  # weight bytes + activations of one token
    assert st.dense_layer_s(1) == pytest.approx(moved / (2039e9 * 0.85))
    kv = 2 * 4096 * 2 * 1001  # K and V of 1,001 tokens, one layer, fp16
    assert st.attn_decode_layer_s(1, 1000) == pytest.approx(kv / (2039e9 * 0.85))
    pairs = 4096 * (4096 + 1) / 2
    assert st.attn_prefill_layer_s(4096, 0) == pytest.approx(4 * 4096 * pairs / (312e12 * 0.6))
    assert st.allreduce_s(1e6) == 0.0
    st2 = RooflineStages(RooflineCostModel(DeploymentSpec(dep.model, dep.gpu, 2)))
    assert st2.allreduce_s(1e6) == pytest.approx(8e-6 + 1e6 / (300e9 * 0.8))
    assert st.step_fixed_s(4, 0) == pytest.approx(0.3e-3)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_roofline_stages_compose_to_the_roofline(tp):
    dep = DeploymentSpec(get_model("llama-2-7b"), get_gpu("A100-80GB"), tp)
    roof = RooflineCostModel(dep)
    composed = ComposedCostModel(RooflineStages(roof), dep.model, tp)
    decode = _sums([(1, 700)] * 32) + (32, 5)
    np.testing.assert_allclose(composed.iteration_times_from_sums(*decode),
                               roof.iteration_times_from_sums(*decode), rtol=1e-9)
    prefill = _sums([(2048, 0)]) + (1, 1)
    got, want = (m.iteration_times_from_sums(*prefill)[0] for m in (composed, roof))
    assert want <= got <= 1.02 * want  # the lm_head's own max: a little more, never less


def test_profile_cost_model_iteration_times(tmp_path):
    t = load_profiles(write_tree(tmp_path))
    dep = DeploymentSpec(get_model("llama-2-7b"), get_gpu("A100-80GB"), 1)
    model = ProfileCostModel(t, dep)
    st = model.stages
    times = model.iteration_times_from_sums(*_sums([(1, 128)] * 4), 4, 3)
    first = 32 * (st.dense_layer_s(4) + st.attn_decode_layer_s(4, 128)) + st.step_fixed_s(4, 4)
    assert times[0] == pytest.approx(first) and len(times) == 3
    assert times[0] <= times[1] <= times[2]


# ---- the report ---------------------------------------------------------------------------
def _check_outputs(out: Path) -> dict:
    for name in ("rows.csv", "summary.csv", "summary.json", "fidelity.png"):
        assert (out / name).stat().st_size > 0
    return json.loads((out / "summary.json").read_text())


def test_report_on_fixtures(tmp_path):
    from experiments.fidelity.main import main, run_report

    write_tree(tmp_path / "p")
    assert main([str(tmp_path / "p"), "--out", str(tmp_path / "out")]) == 0
    meta = _check_outputs(tmp_path / "out")
    stages = {r["stage"] for r in meta["summary"]}
    assert {"dense", "attention", "allreduce", "step", "layers_no_attn"} <= stages
    prof = run_report(tmp_path / "p", cost_model="profile")
    exact = prof["rows"][prof["rows"].stage.isin(["dense", "attention", "allreduce"])]
    assert exact["abs_error"].max() < 1e-9  # the tables reproduce themselves


@pytest.mark.skipif(not (SHARED / "a100").is_dir(), reason="shared A100 profiles absent")
def test_report_on_shared_a100(tmp_path):
    from experiments.fidelity.main import run_report

    result = run_report(SHARED, "llama-2-7b", "A100-80GB", "roofline", out=tmp_path)
    meta = _check_outputs(tmp_path)
    summary = result["summary"]
    assert set(summary.tp) == {1, 2, 4, 8}
    assert {"prefill", "decode_small", "decode_large"} <= set(summary.regime)
    assert meta["cost_model"] == "roofline"
    dense_decode = summary[(summary.stage == "dense") & (summary.regime == "decode_small")]
    assert (dense_decode.bias < 0).all()  # the roofline is optimistic where decode dominates


def test_report_with_calibration_file(tmp_path):
    import dataclasses

    from experiments.fidelity.main import run_report

    write_tree(tmp_path / "p")
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps({
        "model": dataclasses.asdict(get_model("llama-2-7b")),
        "device": dataclasses.asdict(get_gpu("A100-80GB")),
        "roofline": {"memory_efficiency": 0.425}}))
    base = run_report(tmp_path / "p", cost_model="roofline")["rows"]
    slow = run_report(tmp_path / "p", calibration=str(calib))
    assert "calibrated" in slow["cost_model"]
    one = (base.stage == "dense") & (base.num_tokens == 1) & (base.tp == 1)
    ratio = slow["rows"][one].predicted_s.iloc[0] / base[one].predicted_s.iloc[0]
    assert ratio == pytest.approx(2.0, rel=0.02)  # memory-bound: half the bandwidth


def test_stage_kind_falls_back_to_roofline_without_the_stage_model(tmp_path, monkeypatch,
                                                                    capsys):
    import sys

    from experiments.fidelity.main import run_report

    write_tree(tmp_path / "p")
    monkeypatch.setitem(sys.modules, "sim.cost.stage_model", None)  # import now raises ImportError
    result = run_report(tmp_path / "p", cost_model="stage")
    assert result["cost_model"] == "roofline"
    assert "not available" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="cost_model"):
        run_report(tmp_path / "p", cost_model="magic")


def test_scatter_grid_many_matches_scalar():
    a = np.array([1, 1, 4, 4, 16, 16, 32])
    b = np.array([100, 1000, 100, 1000, 500, 2000, 1500])
    for log_a in (False, True):
        grid = ScatterGrid(a, b, 1.0 + a * b / 100.0, log_a=log_a)
        kv = np.linspace(50, 2500, 97)
        for q in (1, 3, 4, 10, 20, 32, 40):
            want = [grid(q, k) for k in kv]
            got = grid.many(q, kv)
            for w, g in zip(want, got):
                assert (w is None and np.isnan(g)) or g == pytest.approx(w, rel=1e-12)


def test_multi_iteration_decode_matches_iteration_by_iteration(tmp_path):
    from sim.core.step_shape import BatchShape

    t = load_profiles(write_tree(tmp_path))
    for tp in (1, 2):
        dep = DeploymentSpec(get_model("llama-2-7b"), get_gpu("A100-80GB"), tp)
        model = ProfileCostModel(t, dep)
        times = model.iteration_times_from_sums(*_sums([(1, 100)] * 4), 4, 1200)
        kv0 = 101  # cached tokens per row before iteration 2
        for j in (1, 2, 500, 923, 1199):  # crosses the table's kv edge (1,024)
            shape = BatchShape(0, 0.0, 0.0, 4, kv0 + j - 1)
            assert times[j] == pytest.approx(model.iteration_time(shape, 4, 4), rel=1e-12)
