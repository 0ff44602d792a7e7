"""The built-in models: shapes from their public config.json files, and the names they go by.

Positional fields are (name, num_hidden_layers, hidden_size, num_attention_heads,
num_key_value_heads, head_dim, intermediate_size, vocab_size); `max_position_embeddings` is the
config's, which a run enforces as its context (`cluster.max_model_len` may lower it). Totals in
the comments are the published ones (model cards, papers); tests/test_models_current.py checks
each count within 1% and tests/fixtures/models/ holds the config fields they come from.
`sim.models.catalog` serves these by name or alias (HF id, lowercase).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from sim.models.model_spec import ModelSpec
from sim.models.moe import MLASpec, MoESpec

_LLAMA3 = 128256  # tokens: the Llama-3 tokenizer's vocabulary
_QWEN = 151936  # tokens: Qwen3's (and Qwen1's) config vocab_size
_DEEPSEEK_V3_MOE = MoESpec(256, 8, 2048, 58, shared_intermediate_size=2048)
_DEEPSEEK_V3_MLA = MLASpec(1536, 512, 128, 64, 128)

BUILTIN_MODELS: tuple[ModelSpec, ...] = (
    # GLM-1 is a prefix-LM: the prompt attends bidirectionally, so its KV is never reused
    ModelSpec("chatglm-6b", 28, 4096, 32, 32, 128, 16384, 130528, gated_mlp=False,
              tie_word_embeddings=True, max_position_embeddings=2048, causal=False),
    ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, max_position_embeddings=4096),
    ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, max_position_embeddings=4096),
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, max_position_embeddings=4096),
    ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, _LLAMA3, max_position_embeddings=8192),
    # Llama-3.1-8B: Llama-3-8B's shapes with a 128k context (RoPE scaling; long-prompt traces)
    ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, _LLAMA3,
              max_position_embeddings=131072),
    ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, _LLAMA3,
              max_position_embeddings=8192),  # 70.6 B
    ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, _LLAMA3,
              max_position_embeddings=131072),  # 70.6 B
    ModelSpec("llama-3.3-70b", 80, 8192, 64, 8, 128, 28672, _LLAMA3,
              max_position_embeddings=131072),  # Llama-3.1-70B's shapes, 70.6 B
    ModelSpec("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, _LLAMA3,
              max_position_embeddings=131072),  # 405.9 B
    # Qwen(1)-7B's config.json says intermediate_size=22016: the sum of its two MLP inputs.
    ModelSpec("qwen-7b", 32, 4096, 32, 32, 128, 11008, _QWEN, max_position_embeddings=8192),
    # Qwen2.5 Instruct: 32,768 in config.json (the base models' say 131072; 128k needs YaRN)
    ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064,
              max_position_embeddings=32768),  # 7.62 B
    ModelSpec("qwen2.5-72b", 80, 8192, 64, 8, 128, 29568, 152064,
              max_position_embeddings=32768),  # 72.7 B
    # Qwen3 dense: head_dim 128 whatever the width (32B: 64 heads x 128 = 8192 > hidden 5120)
    ModelSpec("qwen3-8b", 36, 4096, 32, 8, 128, 12288, _QWEN,
              max_position_embeddings=40960),  # 8.19 B
    ModelSpec("qwen3-14b", 40, 5120, 40, 8, 128, 17408, _QWEN,
              max_position_embeddings=40960),  # 14.8 B
    ModelSpec("qwen3-32b", 64, 5120, 64, 8, 128, 25600, _QWEN,
              max_position_embeddings=40960),  # 32.8 B
    ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, max_position_embeddings=32768),
    # Mistral-Small-24B-2501: head_dim 128 (32 heads x 128 = 4096 < hidden 5120)
    ModelSpec("mistral-small-24b", 40, 5120, 32, 8, 128, 32768, 131072,
              max_position_embeddings=32768),  # 23.6 B
    # Gemma-2: GeGLU MLP, tied embeddings, a 4,096-token sliding window on every other layer
    # (layers 0, 2, ...); attention (50) and final-logit (30) softcapping are not priced
    ModelSpec("gemma-2-9b", 42, 3584, 16, 8, 256, 14336, 256000, tie_word_embeddings=True,
              max_position_embeddings=8192, sliding_window=4096,
              num_sliding_layers=21),  # 9.24 B; 16 heads x 256 = 4096 > hidden 3584
    ModelSpec("gemma-2-27b", 46, 4608, 32, 16, 128, 36864, 256000, tie_word_embeddings=True,
              max_position_embeddings=8192, sliding_window=4096,
              num_sliding_layers=23),  # 27.2 B
    # Falcon (tests/fixtures/models/falcon-*): GELU MLP of 4 x hidden, no gate, tied embeddings,
    # parallel attention; 7B multi-query (1 KV head), 40B grouped (8 KV heads). The cards'
    # 7.22 B and 41.8 B count the checkpoint's stored copy of the tied lm_head
    ModelSpec("falcon-7b", 32, 4544, 71, 1, 64, 18176, 65024, gated_mlp=False,
              tie_word_embeddings=True, max_position_embeddings=2048,
              parallel_attn=True),  # 6.92 B
    ModelSpec("falcon-40b", 60, 8192, 128, 8, 64, 32768, 65024, gated_mlp=False,
              tie_word_embeddings=True, max_position_embeddings=2048,
              parallel_attn=True),  # 41.30 B
    # small Llama-tokenizer models used as speculative-decoding drafts
    ModelSpec("llama-68m", 2, 768, 12, 12, 64, 3072, 32000, max_position_embeddings=2048),
    ModelSpec("tinyllama-1.1b", 22, 2048, 32, 4, 64, 5632, 32000, max_position_embeddings=2048),
    # mixture-of-experts (sim/models/moe.py; shapes of tests/fixtures/moe/*/config.json)
    ModelSpec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, max_position_embeddings=32768,
              moe=MoESpec(8, 2, 14336, 32)),  # 46.7 B total, 12.9 B active
    ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144, _QWEN,
              max_position_embeddings=40960, moe=MoESpec(128, 8, 768, 48)),  # 30.5 B, 3.3 B
    ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 12288, _QWEN,
              max_position_embeddings=40960, moe=MoESpec(128, 8, 1536, 94)),  # 235 B, 22 B
    # DeepSeek-V3: 3 dense layers then 58 MoE layers of 256 routed + 1 shared expert, MLA
    # attention (per-head K width 128 + 64); the multi-token-prediction module is not counted
    ModelSpec("deepseek-v3", 61, 7168, 128, 128, 192, 18432, 129280,
              max_position_embeddings=163840, moe=_DEEPSEEK_V3_MOE,
              mla=_DEEPSEEK_V3_MLA),  # 671 B total, 37.6 B active
    # DeepSeek-R1: DeepSeek-V3's architecture and config.json shapes, trained further
    ModelSpec("deepseek-r1", 61, 7168, 128, 128, 192, 18432, 129280,
              max_position_embeddings=163840, moe=_DEEPSEEK_V3_MOE, mla=_DEEPSEEK_V3_MLA),
)

ALIASES: Mapping[str, str] = MappingProxyType({
    "thudm/chatglm-6b": "chatglm-6b",
    "llama2-7b": "llama-2-7b", "meta-llama/llama-2-7b-hf": "llama-2-7b",
    "meta-llama/llama-2-7b-chat-hf": "llama-2-7b",
    "llama2-13b": "llama-2-13b", "meta-llama/llama-2-13b-hf": "llama-2-13b",
    "meta-llama/llama-2-13b-chat-hf": "llama-2-13b",
    "llama2-70b": "llama-2-70b", "meta-llama/llama-2-70b-hf": "llama-2-70b",
    "meta-llama/llama-2-70b-chat-hf": "llama-2-70b",
    "llama3-8b": "llama-3-8b", "meta-llama/meta-llama-3-8b": "llama-3-8b",
    "meta-llama/meta-llama-3-8b-instruct": "llama-3-8b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b", "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama3-70b": "llama-3-70b", "meta-llama/meta-llama-3-70b": "llama-3-70b",
    "meta-llama/meta-llama-3-70b-instruct": "llama-3-70b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
    "meta-llama/llama-3.3-70b-instruct": "llama-3.3-70b",
    "meta-llama/llama-3.1-405b": "llama-3.1-405b",
    "meta-llama/llama-3.1-405b-instruct": "llama-3.1-405b",
    "qwen/qwen-7b": "qwen-7b", "qwen/qwen-7b-chat": "qwen-7b",
    # the Instruct configs only: the base models' config.json says 131072 (see above)
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b", "qwen/qwen2.5-72b-instruct": "qwen2.5-72b",
    "qwen/qwen3-8b": "qwen3-8b", "qwen/qwen3-14b": "qwen3-14b", "qwen/qwen3-32b": "qwen3-32b",
    # v0.2 only: Mistral-7B-v0.1 attends over a 4,096-token sliding window on every layer
    # (its config.json is refused, see sim/models/hf_config.py)
    "mistralai/mistral-7b-instruct-v0.2": "mistral-7b",
    "mistralai/mistral-small-24b-instruct-2501": "mistral-small-24b",
    "mistralai/mistral-small-24b-base-2501": "mistral-small-24b",
    "google/gemma-2-9b": "gemma-2-9b", "google/gemma-2-9b-it": "gemma-2-9b",
    "google/gemma-2-27b": "gemma-2-27b", "google/gemma-2-27b-it": "gemma-2-27b",
    "tiiuae/falcon-7b": "falcon-7b", "tiiuae/falcon-7b-instruct": "falcon-7b",
    "tiiuae/falcon-40b": "falcon-40b", "tiiuae/falcon-40b-instruct": "falcon-40b",
    "jackfram/llama-68m": "llama-68m",
    "tinyllama/tinyllama-1.1b-chat-v1.0": "tinyllama-1.1b", "tinyllama-1.1b-chat": "tinyllama-1.1b",
    "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
    "qwen/qwen3-30b-a3b": "qwen3-30b-a3b", "qwen/qwen3-235b-a22b": "qwen3-235b-a22b",
    "deepseek-ai/deepseek-v3": "deepseek-v3", "deepseek-ai/deepseek-r1": "deepseek-r1",
})
