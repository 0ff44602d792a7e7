"""Safe loading: nothing a config names (calibration, learned model, HF config.json, checkpoint,
embedding cache) executes code; a malformed file is a ConfigError naming the field and value;
a model the simulator cannot represent is refused, not simulated as another; a real-backend
model too big for its device fails before anything is allocated, with the sizes."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from experiments.config.experiment import cluster_from_dict
from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.cost_model import CostModelConfig
from sim.cost.overhead import build_overhead
from sim.hardware.gpus import get_gpu
from sim.measured.learned_trees import FORMAT
from sim.models.catalog import get_model, model_from_config_dict, resolve_model
from sim.util.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
CAL = "cluster.cost_model.calibration"
LEAF_TREE = {"children_left": [-1], "children_right": [-1], "feature": [-2],
             "threshold": [-2.0], "value": [0.0]}
TREES = {"format": FORMAT, "format_version": 1, "num_inputs": 12, "init": 0.0,
         "learning_rate": 0.1, "trees": [LEAF_TREE]}


class Payload:
    """A pickle whose loading creates `marker` (stands for any code a pickle can run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def no_unpickling(monkeypatch):
    """Fail the test if anything unpickles."""
    import joblib

    def refuse(*args, **kwargs):
        raise AssertionError("something unpickled a file")

    for module, name in ((pickle, "load"), (pickle, "loads"), (joblib, "load")):
        monkeypatch.setattr(module, name, refuse)


def calibration(tmp_path: Path, learned: dict | None = None, **changes) -> Path:
    data = {"version": 1, "model": dataclasses.asdict(get_model("llama-2-7b")),
            "device": dataclasses.asdict(get_gpu("A100-80GB")),
            "roofline": dataclasses.asdict(CostModelConfig()), "kv_capacity_tokens": 4096,
            "block_size": 16, "learned": learned, **changes}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return path


def load(path: Path, kind: str = "learned") -> list:
    return build_executors(ClusterSpec(cost_model={"calibration": str(path), "kind": kind}))


# ---- calibrations: the learned model is JSON trees, never a pickle ----------------------------
def test_learned_json_trees_beside_the_calibration_load(tmp_path, no_unpickling):
    (tmp_path / "cal.learned.json").write_text(json.dumps(TREES))
    ex = load(calibration(tmp_path, {"path": "cal.learned.json"}))[0]
    assert "calibrated learned" in ex.name
    assert load(calibration(tmp_path, TREES))[0].kv_capacity_tokens == 4096  # embedded trees


@pytest.mark.parametrize("name", ["cal.learned.joblib", "cal.learned.pkl"])
def test_a_pickled_learned_model_is_refused_and_never_runs(tmp_path, no_unpickling, name):
    marker = tmp_path / "pwned"
    (tmp_path / name).write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ConfigError) as err:
        load(calibration(tmp_path, {"path": name}))
    assert err.value.field == f"{CAL}.learned.path" and name in str(err.value)
    assert "python -m real.calibrate" in str(err.value)
    assert not marker.exists()


def test_the_pickle_payload_would_run_if_unpickled(tmp_path):
    """The payload of the test above is live: unpickling it does create its marker."""
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


def test_a_pickle_named_json_is_read_as_json_and_refused(tmp_path, no_unpickling):
    marker = tmp_path / "pwned"
    (tmp_path / "cal.learned.json").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ConfigError, match="not a JSON learned-model") as err:
        load(calibration(tmp_path, {"path": "cal.learned.json"}))
    assert err.value.field == f"{CAL}.learned.path"
    assert not marker.exists()


def test_a_learned_model_outside_the_calibration_folder_is_refused(tmp_path):
    inner = tmp_path / "cal"
    inner.mkdir()
    (tmp_path / "outside.learned.json").write_text(json.dumps(TREES))
    (inner / "link.learned.json").symlink_to(tmp_path / "outside.learned.json")
    for value in ("../outside.learned.json", str(tmp_path / "outside.learned.json"),
                  "link.learned.json"):
        with pytest.raises(ConfigError) as err:
            load(calibration(inner, {"path": value}))
        assert err.value.field == f"{CAL}.learned.path" and err.value.value == value
        assert f"{CAL}.learned.path={value!r}" in str(err.value)


@pytest.mark.parametrize("tree, field, value", [
    ({**LEAF_TREE, "children_left": [0], "children_right": [0], "feature": [0]},
     "children_left", [0]),  # a node that is its own child: evaluating it would never end
    ({"children_left": [1, -1, -1], "children_right": [2, -1, -1], "feature": [40, -2, -2],
      "threshold": [0.5, 0, 0], "value": [0, 1, 2]}, "feature", [40, -2, -2]),  # 40 of 12
    ({**LEAF_TREE, "value": ["x"]}, "value", ["x"]),
    ({**LEAF_TREE, "threshold": [1.0, 2.0]}, "threshold", 2),  # its length
])
def test_malformed_trees_are_refused_naming_the_array(tmp_path, tree, field, value):
    with pytest.raises(ConfigError) as err:
        load(calibration(tmp_path, {**TREES, "trees": [tree]}))
    assert err.value.field == f"{CAL}.learned.trees[0].{field}" and err.value.value == value
    assert str(err.value).startswith(f"{CAL}.learned.trees[0].{field}={value!r}")


@pytest.mark.parametrize("content, reason", [
    (b"\x80\x04\x95\x00\xff\xfe binary", "not a JSON calibration file"),
    (b'{"model": {"name": "llama', "not a JSON calibration file"),  # truncated
    (b"[1, 2, 3]", "holds a JSON list, not an object"),
    (b'{"device": {}, "roofline": {}}', "no 'model' section"),
    (b'{"model": {}, "roofline": {}}', "no 'device' section"),
    (b'{"model": {}, "device": {}}', "no 'roofline' section"),
    (b'{"model": [], "device": {}, "roofline": {}}', "'model' must be a JSON object"),
])
def test_a_malformed_calibration_is_a_config_error_naming_the_path(tmp_path, content, reason):
    path = tmp_path / "cal.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        load(path, "roofline")
    assert err.value.field == CAL and err.value.value == str(path)
    assert reason in str(err.value) and str(path) in str(err.value)


def test_bad_values_in_a_calibration_name_their_key(tmp_path):
    model = {**dataclasses.asdict(get_model("llama-2-7b")), "num_layers": "32"}
    with pytest.raises(ConfigError, match=f"{CAL}.model.num_layers='32'"):
        load(calibration(tmp_path, model=model), "roofline")
    with pytest.raises(ConfigError, match=f"{CAL}.roofline.compute_efficency=0.5"):
        load(calibration(tmp_path, roofline={"compute_efficency": 0.5}), "roofline")
    with pytest.raises(ConfigError, match=f"{CAL}.kv_capacity_tokens='many'"):
        load(calibration(tmp_path, kv_capacity_tokens="many"), "roofline")
    with pytest.raises(ConfigError, match="cluster.cost_model.kv_capacity_tokens=-5"):
        build_executors(ClusterSpec(cost_model={"calibration": str(calibration(tmp_path)),
                                                "kv_capacity_tokens": -5}))


def test_a_malformed_overhead_calibration_names_field_and_value(tmp_path):
    path = tmp_path / "cal.json"
    for content, reason in ((b"\xff\xfe\x00", "not a JSON calibration file"),
                            (b"[]", "holds a JSON list")):
        path.write_bytes(content)
        with pytest.raises(ConfigError, match=reason) as err:
            build_overhead({"calibration": str(path)})
        assert err.value.field == "cluster.scheduling_overhead.calibration"
        assert err.value.value == str(path)
    path.write_text(json.dumps({"scheduling_overhead": {"fixed_s": "1ms"}}))
    with pytest.raises(ConfigError, match="scheduling_overhead.fixed_s='1ms'"):
        build_overhead({"calibration": str(path)})


# ---- HF config.json: no remote code; models a ModelSpec cannot represent are refused ----------
@pytest.mark.parametrize("folder, field, value", [
    ("../moe/gpt-oss-20b", "num_local_experts", 32),  # an MoE layout not read (issue 16)
    ("mistral-7b-v0.1", "sliding_window", 4096),
])
def test_unrepresentable_models_are_refused_naming_field_and_value(folder, field, value):
    with pytest.raises(ConfigError) as err:
        resolve_model(str(FIXTURES / folder))
    assert err.value.field == f"model.config.{field}" and err.value.value == value
    assert f"model.config.{field}={value}" in str(err.value)
    with pytest.raises(ConfigError) as err:  # as a sweep config names it
        cluster_from_dict({"model": str(FIXTURES / folder)})
    assert err.value.field == f"cluster.model.config.{field}"


def test_the_real_engine_refuses_them_too():
    pytest.importorskip("torch")
    from real.spec import resolve_real_model

    with pytest.raises(ConfigError, match="num_local_experts=8"):
        resolve_real_model(str(FIXTURES / "mixtral-8x7b"))


def fixture_dict(folder: str) -> dict:
    return json.loads((FIXTURES / folder / "config.json").read_text())


@pytest.mark.parametrize("changes, field, value", [
    ({"n_routed_experts": None, "n_shared_experts": None, "num_experts_per_tok": None,
      "moe_intermediate_size": None}, "kv_lora_rank", 512),  # MLA alone, dense MLP
    ({"model_type": "qwen2_moe", "num_experts": 60}, "num_experts", 60),
    ({"model_type": "t5", "is_encoder_decoder": True}, "is_encoder_decoder", True),
    ({"model_type": "bloom", "n_routed_experts": None, "n_shared_experts": None,
      "num_experts_per_tok": None, "moe_intermediate_size": None, "kv_lora_rank": None},
     "model_type", "bloom"),  # (falcon is read since issue 31: tests/test_falcon.py)
    ({"model_type": "qwen2", "n_routed_experts": None, "n_shared_experts": None,
      "num_experts_per_tok": None, "moe_intermediate_size": None, "kv_lora_rank": None,
      "layer_types": ["full_attention", "sliding_attention"]}, "layer_types", "sliding_attention"),
    ({"model_type": "llama", "n_routed_experts": None, "n_shared_experts": None,
      "num_experts_per_tok": None, "moe_intermediate_size": None, "kv_lora_rank": None,
      "hidden_size": "2048"}, "hidden_size", "2048"),
])
def test_other_unrepresentable_configs_name_field_and_value(changes, field, value):
    cfg = {**fixture_dict("deepseek-v2-lite"), **changes}
    with pytest.raises(ConfigError) as err:
        model_from_config_dict(cfg, "m")
    assert err.value.field == f"model.config.{field}" and err.value.value == value


def test_supported_families_still_load():
    mistral = {**fixture_dict("mistral-7b-v0.1"), "sliding_window": None}  # v0.2: full attention
    assert model_from_config_dict(mistral, "mistral-7b") == get_model("mistral-7b")
    qwen2 = {**mistral, "model_type": "qwen2", "sliding_window": 4096,
             "use_sliding_window": False}  # Qwen2 configs carry a window they do not use
    assert model_from_config_dict(qwen2, "q").num_layers == 32
    window = {**fixture_dict("mistral-7b-v0.1"), "max_position_embeddings": 4096}
    assert model_from_config_dict(window, "m").max_position_embeddings == 4096  # window = ctx


def test_custom_code_in_a_model_folder_never_runs(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    calls = []
    real_from_pretrained = transformers.AutoConfig.from_pretrained

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real_from_pretrained(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", spy)
    marker = tmp_path / "pwned"
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "configuration_evil.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (folder / "config.json").write_text(json.dumps({
        **fixture_dict("mistral-7b-v0.1"), "model_type": "evil", "sliding_window": None,
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}}))
    with pytest.raises(ConfigError, match="model.config.model_type='evil'"):
        resolve_model(str(folder))
    assert not marker.exists() and calls == []  # auto_map: read as plain JSON only
    with pytest.raises(ConfigError):  # read through AutoConfig, refused (sliding window)
        resolve_model(str(FIXTURES / "mistral-7b-v0.1"))
    assert calls and all(c.get("trust_remote_code") is False for c in calls)


@pytest.mark.parametrize("content", [b"\x00\x01binary", b'{"model_type": "llama", ', b"[]"])
def test_a_malformed_config_json_is_a_config_error(tmp_path, content):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(ConfigError) as err:
        resolve_model(str(tmp_path))
    assert err.value.field == "model" and str(tmp_path) in str(err.value)


# ---- checkpoints and caches: tensors and arrays only ------------------------------------------
def test_checkpoints_are_safetensors_only_and_stay_in_their_folder(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from real.weights import checkpoint_files

    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load called"))
    marker = tmp_path / "pwned"
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ConfigError, match="pickled .bin / .pt checkpoints are never loaded") as err:
        checkpoint_files(tmp_path)
    assert err.value.field == "real.weights" and err.value.value == str(tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    for shard in ("../outside.safetensors", "/etc/passwd", "pytorch_model.bin"):
        index.write_text(json.dumps({"weight_map": {"lm_head.weight": shard}}))
        with pytest.raises(ConfigError) as err:
            checkpoint_files(tmp_path)
        assert err.value.field == "real.weights.weight_map" and err.value.value == shard
    index.write_text("[]")
    with pytest.raises(ConfigError, match="not a safetensors index"):
        checkpoint_files(tmp_path)
    assert not marker.exists()


def test_an_embedding_cache_holding_pickles_is_rebuilt_not_loaded(tmp_path):
    from policies.magnus.embedding_cache import EmbeddingCache

    marker = tmp_path / "pwned"
    keys = np.array([Payload(marker)], dtype=object)
    np.savez(tmp_path / "m.npz", keys=keys, vectors=np.zeros((1, 4), np.float32))
    assert len(EmbeddingCache(tmp_path, "m")) == 0 and not marker.exists()


# ---- the real backend: a model too big for its device fails before allocating ----------------
GIB = 2**30


def test_a_model_too_big_for_host_memory_fails_at_the_config_check(monkeypatch):
    from experiments.run import check_cluster

    monkeypatch.setattr("real.sizing.host_memory_bytes", lambda: 4 * GIB)
    spec = ClusterSpec(model="llama-2-7b", backend="real", real={"device": "cpu",
                                                                  "kv_tokens": 1024})
    with pytest.raises(ConfigError) as err:
        check_cluster(spec)
    weights = get_model("llama-2-7b").num_params * 4  # fp32 on CPU
    text = str(err.value)
    assert err.value.field == "cluster.model" and err.value.value == "llama-2-7b"
    assert f"weights 25.10 GiB ({weights:,} bytes)" in text
    assert f"4.00 GiB ({4 * GIB:,} bytes) usable on cpu" in text
    assert "KV per block 16.00 MiB (16,777,216 bytes)" in text  # 16 tokens x 1 MiB (fp32)
    assert "per max-length sequence (4096 tokens) 4.00 GiB" in text


def test_a_kv_budget_too_big_names_kv_tokens(monkeypatch):
    pytest.importorskip("torch")
    from real.options import check_real_cluster

    monkeypatch.setattr("real.sizing.host_memory_bytes", lambda: GIB)
    spec = ClusterSpec(model="tiny", backend="real", real={"device": "cpu",
                                                           "kv_tokens": 10**8})
    with pytest.raises(ConfigError, match="cluster.real.kv_tokens=100000000: the KV budget"):
        check_real_cluster(spec)


def test_the_executor_checks_before_allocating_anything(monkeypatch):
    torch = pytest.importorskip("torch")
    import real.executor
    from real.memory import check_fits
    from real.spec import resolve_real_model

    monkeypatch.setattr("real.memory.host_memory_bytes", lambda: 10_000)
    monkeypatch.setattr(real.executor, "build_model", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(ConfigError, match="cluster.model='tiny'.*usable on cpu"):
        real.executor.TorchExecutor("tiny", "cpu", "fp32", kv_tokens=256, warmup_iterations=0)
    # a CUDA device, faked: 24 GiB of which 2 GiB are held by another process
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (22 * GIB, 24 * GIB))
    monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: 0)
    config = resolve_real_model("llama-2-13b")  # 13B in bf16: 24.2 GiB of weights
    with pytest.raises(ConfigError, match=r"weights 24\.2.*usable on cuda \(24\.00 GiB x "
                       r"gpu_memory_utilization 0\.9, 2\.00 GiB already in use\)"):
        check_fits(config, 16, torch.bfloat16, torch.device("cuda"), None, 0.9)
    check_fits(resolve_real_model("tiny"), 16, torch.bfloat16, torch.device("cuda"), None, 0.9)
