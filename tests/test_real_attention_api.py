"""The varlen attention call follows the installed torch's signature (CPU: no kernel runs)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")
varlen = pytest.importorskip("torch.nn.attention.varlen")

from real.attention import BatchLayout  # noqa: E402
from real.attn_varlen import VarlenBackend, varlen_call_options  # noqa: E402


def torch_2_11_varlen(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None,
                      scale=None, window_size=(-1, -1)):
    """varlen_attn's signature in torch 2.9-2.11: no enable_gqa, no block table."""


def layout(block_size: int) -> BatchLayout:
    tables = [np.arange(4, dtype=np.int64), np.arange(4, 8, dtype=np.int64)]
    return BatchLayout(np.array([3, 1]), np.array([0, 9]), tables, block_size)


def call_arguments(backend: VarlenBackend, block_size: int) -> inspect.BoundArguments:
    """The installed varlen_attn's binding of the arguments the backend passes."""
    meta = backend.build(layout(block_size), torch.device("cpu"))
    q = torch.zeros(4, 4, 8)
    k = torch.zeros(8, block_size, 2, 8)
    return inspect.signature(varlen.varlen_attn).bind(
        q, k, k, meta.cu_q, meta.cu_k, meta.max_q, meta.max_k,
        **backend._torch_keywords(q, k, meta))


@pytest.mark.parametrize("block_size", [16, 256])
def test_the_call_binds_to_the_installed_varlen_attn(block_size):
    """Fails when an installed torch renames or drops a keyword the engine passes."""
    backend = VarlenBackend("torch_varlen", block_size)
    bound = call_arguments(backend, block_size)
    opts = varlen_call_options(varlen.varlen_attn)
    assert backend.paged == (block_size % 256 == 0 and opts.block_table is not None)
    if backend.paged:
        assert bound.arguments[opts.block_table] is not None


def test_an_older_torch_without_gqa_or_block_tables_runs_gathered():
    opts = varlen_call_options(torch_2_11_varlen)
    assert not opts.gqa_keyword and opts.block_table is None and opts.causal == "window_size"
    backend = VarlenBackend("torch_varlen", 256, kernel=torch_2_11_varlen)
    assert backend.options == opts and not backend.paged
    assert backend.name == "torch_varlen(gathered)"
    meta = backend.build(layout(256), torch.device("cpu"))
    q = torch.zeros(4, 4, 8)
    kw = backend._torch_keywords(q, q, meta)
    inspect.signature(torch_2_11_varlen).bind(q, q, q, meta.cu_q, meta.cu_k, 1, 1, **kw)
    assert kw == {"window_size": (-1, 0)}


def test_a_torch_without_a_causal_keyword_is_refused_by_name():
    with pytest.raises(RuntimeError, match="window_size nor is_causal"):
        varlen_call_options(lambda query, key, value: None)
