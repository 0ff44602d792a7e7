"""The real engine's forward pass against transformers and against itself (CPU, fp32)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from real.executor import TorchExecutor  # noqa: E402
from real.spec import config_from_hf_dict, resolve_real_model  # noqa: E402
from real.weights import build_model, load_hf_state_dict  # noqa: E402

TINY_HF = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False)
ATOL = 2e-5  # fp32 rounding of two implementations


def hf_model(kind: str, **overrides):
    """A random-init transformers model of the tiny shape, and its config dict."""
    torch.manual_seed(0)
    if kind == "qwen2":
        cfg = transformers.Qwen2Config(**{**TINY_HF, "rope_theta": 10000.0, **overrides})
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        cfg = transformers.LlamaConfig(**{**TINY_HF, "rope_theta": 10000.0, **overrides})
        model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # HF zero-inits biases: make them matter
                p.normal_(0.0, 0.05)
    return model.eval(), cfg.to_dict()


def engine_for(cfg_dict: dict, kv_tokens: int = 4096) -> TorchExecutor:
    return TorchExecutor(config_from_hf_dict(cfg_dict, "hf-tiny"), "cpu", "fp32",
                         kv_tokens=kv_tokens, warmup_iterations=0)


def prompt(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n)


@pytest.mark.parametrize("kind,overrides", [
    ("llama", {}),
    ("llama", {"num_key_value_heads": 4}),  # multi-head attention
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 64}}),
    ("qwen2", {}),  # q/k/v biases
])
def test_logits_match_transformers(kind, overrides):
    hf, cfg = hf_model(kind, **overrides)
    engine = engine_for(cfg)
    load_hf_state_dict(engine.model, hf.state_dict())  # every tensor, into the fused weights
    ids = prompt(48)
    with torch.no_grad():
        ref = hf(torch.tensor(ids)[None]).logits[0]
        ours = engine.runner.logits((0,), (48,), (0,), ids)
    torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)
    assert ref.abs().max() > 0.05  # not a trivially small comparison


def test_chunked_prefill_and_decodes_equal_one_pass():
    engine = TorchExecutor("tiny", "cpu", "fp32", kv_tokens=2048, warmup_iterations=0)
    ids = prompt(61, seed=1)
    whole = engine.runner.logits((0,), (61,), (0,), ids)
    # the same sequence as request 1: three prefill chunks (crossing 16-token blocks), then
    # decodes batched with an unrelated request to exercise the padded decode path
    parts = [engine.runner.logits((1,), (7,), (0,), ids[:7]),
             engine.runner.logits((1,), (20,), (7,), ids[7:27]),
             engine.runner.logits((1,), (24,), (27,), ids[27:51])]
    engine.runner.logits((2,), (33,), (0,), prompt(33, seed=2))
    for pos in range(51, 61):
        both = engine.runner.logits((2, 1), (1, 1), (33 + pos - 51, pos),
                                    np.array([5, ids[pos]]))
        parts.append(both[1:])
    torch.testing.assert_close(torch.cat(parts), whole, atol=ATOL, rtol=0)
    engine.check()


def test_mixed_batch_equals_separate_requests():
    engine = TorchExecutor("tiny", "cpu", "fp32", kv_tokens=2048, warmup_iterations=0)
    a, b = prompt(30, 3), prompt(12, 4)
    alone_a = engine.runner.logits((0,), (30,), (0,), a)
    alone_b = engine.runner.logits((1,), (12,), (0,), b)
    engine.runner.logits((2,), (29,), (0,), a[:29])  # request 2: a, computed up to its end
    mixed = engine.runner.logits((3, 2), (12, 1), (0, 29), np.concatenate([b, a[29:]]))
    torch.testing.assert_close(mixed[:12], alone_b, atol=ATOL, rtol=0)
    torch.testing.assert_close(mixed[12:], alone_a[29:], atol=ATOL, rtol=0)


def test_safetensors_checkpoint_loads_like_state_dict(tmp_path):
    from safetensors.torch import save_file

    hf, cfg = hf_model("llama")
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(__import__("json").dumps(cfg, default=str))
    engine = TorchExecutor(str(tmp_path), "cpu", "fp32", kv_tokens=1024, weights=str(tmp_path),
                           warmup_iterations=0)
    ids = prompt(20)
    with torch.no_grad():
        ref = hf(torch.tensor(ids)[None]).logits[0]
    torch.testing.assert_close(engine.runner.logits((0,), (20,), (0,), ids), ref, atol=ATOL,
                               rtol=0)


def test_random_weights_are_seeded():
    config = resolve_real_model("tiny")
    a = build_model(config, torch.device("cpu"), torch.float32, seed=3)
    b = build_model(config, torch.device("cpu"), torch.float32, seed=3)
    c = build_model(config, torch.device("cpu"), torch.float32, seed=4)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if not name.endswith("norm.weight"):
            assert not torch.equal(pa, pc), name


def test_tied_embeddings_share_the_matrix():
    spec = dataclasses.replace(resolve_real_model("tiny").spec, tie_word_embeddings=True)
    config = dataclasses.replace(resolve_real_model("tiny"), spec=spec)
    model = build_model(config, torch.device("cpu"), torch.float32)
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_builtin_shapes_resolve_with_their_constants():
    llama3 = resolve_real_model("llama-3-8b")
    assert llama3.rope_theta == 500000.0 and llama3.spec.num_kv_heads == 8
    assert resolve_real_model("tiny").spec.num_layers == 2
    with pytest.raises(ValueError):
        resolve_real_model("chatglm-6b")  # not a gated Llama-family MLP


def reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, window_size=(-1, 0), enable_gqa=False,
                     seqused_k=None, block_table=None):
    """torch's varlen_attn semantics in plain torch: ragged, bottom-right causal, paged or not."""
    assert window_size == (-1, 0)
    out = torch.empty_like(q)
    for i in range(len(cu_q) - 1):
        qs, qe = int(cu_q[i]), int(cu_q[i + 1])
        if block_table is not None:
            used = int(seqused_k[i])
            ki = k[block_table[i].long()].flatten(0, 1)[:used]
            vi = v[block_table[i].long()].flatten(0, 1)[:used]
        else:
            ki, vi = k[int(cu_k[i]): int(cu_k[i + 1])], v[int(cu_k[i]): int(cu_k[i + 1])]
        n, length = qe - qs, ki.shape[0]
        mask = torch.arange(length)[None, :] <= (length - n + torch.arange(n))[:, None]
        o = torch.nn.functional.scaled_dot_product_attention(
            q[qs:qe].transpose(0, 1)[None], ki.transpose(0, 1)[None], vi.transpose(0, 1)[None],
            attn_mask=mask, enable_gqa=enable_gqa)
        out[qs:qe] = o[0].transpose(0, 1)
    return out


@pytest.mark.parametrize("block_size", [16, 256])
def test_varlen_metadata_drives_a_reference_kernel_to_the_sdpa_result(block_size):
    """The GPU varlen backends' metadata (cu offsets, gathered slots, paged block tables),
    checked on CPU with a plain-torch kernel of the same contract."""
    from real.attn_varlen import VarlenBackend

    def mixed(engine: TorchExecutor) -> torch.Tensor:
        engine.runner.logits((1, 2), (300, 40), (0, 0), prompt(340, 5))
        engine.runner.logits((3,), (70,), (0,), prompt(70, 6))
        return engine.runner.logits((1, 2, 3, 4), (64, 1, 1, 29), (300, 40, 70, 0),
                                    prompt(95, 7))

    ref = TorchExecutor("tiny", "cpu", kv_tokens=4096, block_size=block_size, warmup_iterations=0)
    ex = TorchExecutor("tiny", "cpu", kv_tokens=4096, block_size=block_size, warmup_iterations=0)
    backend = VarlenBackend("torch_varlen", block_size)
    backend._kernel = reference_varlen
    ex.backend = ex.runner.backend = backend
    assert backend.paged == (block_size == 256)
    torch.testing.assert_close(mixed(ex), mixed(ref), atol=ATOL, rtol=0)
