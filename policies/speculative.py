"""Speculative decoding for the paged policies (`vllm`, `sarathi`): a draft proposes, the target
verifies (Leviathan et al., ICML 2023; vLLM's draft-model speculation).

With `num_speculative_tokens` = k > 0, every decode is a verify: the draft proposes k tokens per
running request in k draft iterations, and the target computes k + 1 tokens per request (the last
sampled token and the k proposals) in one iteration. A request accepts `a` proposals: i.i.d.
Bernoulli(alpha) trials, stopping at the first rejection, at most k; it then emits a + 1 tokens
(the accepted ones and the target's own next token), capped at its remaining outputs. So
E[tokens per verify] = (1 - alpha^(k+1)) / (1 - alpha), and k + 1 when alpha = 1.

alpha is `acceptance_rate` for every request, or, with `acceptance_concentration` c > 0, drawn
once per request from Beta(alpha * c, (1 - alpha) * c) (mean alpha; larger c, less spread).
All draws come from the policy's seeded generator.

KV: the policy grows each verifying request by k + 1 slots before the step (preempting as usual)
and trims the k + 1 - emitted slots of rejected proposals after it. Those target positions are
wasted work, counted in the request's `num_padding_tokens` (computed tokens stay = useful +
padding + recomputed). Decode steps are single iterations (no multi-iteration jumps).

`speculative_method: medusa` (Cai et al., ICML 2024): no draft; k Medusa heads on the target
(`cluster.medusa_heads` >= k) propose a tree of candidates, and each verify row computes the
tree's `medusa_tree_size` tokens (the root, the last sampled token, and tree_size - 1 candidates;
tree attention: the candidates are extra query tokens of the row). The longest accepted path has
`a` tokens, drawn like the draft's: leading successes of k Bernoulli(alpha) trials, one per head
(alpha is the probability that the tree holds the right token at that depth, given the path
before it). So E[tokens per verify] is the same closed form with k = heads. The tree's
tree_size - emitted positions are wasted work (`num_padding_tokens`); its KV slots are trimmed.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from sim.core.emit import emit_together
from sim.core.executor import InstanceInfo
from sim.core.request import Request
from sim.memory.block_manager import BlockManager
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError

MAX_SPECULATIVE_TOKENS = 64  # tokens; a sanity bound on k
MAX_TREE_SIZE = 1024  # tokens a Medusa verify row computes at most (Medusa's default: 64)
METHODS = ("draft", "medusa")  # a draft model proposes | Medusa heads propose a tree


def check_speculative(k: int, alpha: float, concentration: float) -> None:
    """Validate the speculative fields of a paged policy's config."""
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= MAX_SPECULATIVE_TOKENS:
        raise ConfigError("num_speculative_tokens", k,
                          f"must be an int in [0, {MAX_SPECULATIVE_TOKENS}]")
    if not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise ConfigError("acceptance_rate", alpha, "must be a probability in [0, 1]")
    if not isinstance(concentration, (int, float)) or not (
            0.0 <= concentration < math.inf):
        raise ConfigError("acceptance_concentration", concentration, "must be finite and >= 0")
    if concentration > 0 and alpha in (0.0, 1.0):
        raise ConfigError("acceptance_concentration", concentration,
                          f"per-request Beta draws need 0 < acceptance_rate < 1, "
                          f"got {alpha}")


def check_method(method: str, k: int, tree_size: int) -> None:
    """Validate `speculative_method` and, for Medusa, `medusa_tree_size` against k heads."""
    if method not in METHODS:
        raise ConfigError("speculative_method", method, f"one of {', '.join(METHODS)}")
    if method == "medusa" and (not isinstance(tree_size, int) or isinstance(tree_size, bool)
                               or not k + 1 <= tree_size <= MAX_TREE_SIZE):
        raise ConfigError("medusa_tree_size", tree_size,
                          f"must be an int in [num_speculative_tokens + 1 = {k + 1}, "
                          f"{MAX_TREE_SIZE}]: the root and at least one path of k candidates")


def accepted_counts(rng: np.random.Generator, alphas: np.ndarray, k: int) -> np.ndarray:
    """Leading successes of k i.i.d. Bernoulli(alphas[i]) trials per request (0..k)."""
    ok = rng.random((len(alphas), k)) < alphas[:, None]
    return np.cumprod(ok, axis=1).sum(axis=1)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """E[accepted + 1] per verify: (1 - alpha^(k+1)) / (1 - alpha), or k + 1 at alpha = 1."""
    return float(k + 1) if alpha == 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


class Speculator:
    """Builds verify steps and applies their outcome for one paged policy."""

    def __init__(self, k: int, alpha: float, concentration: float,
                 rng: np.random.Generator, depth: int | None = None) -> None:
        self.k = k  # candidate tokens per request per verify (a verify row computes k + 1)
        self.depth = k if depth is None else depth  # positions one verify may accept (Medusa:
        # heads; the draft: k)
        self.alpha = alpha  # mean per-token acceptance probability
        self.concentration = concentration  # Beta concentration of per-request rates; 0: none
        self.rng = rng  # the policy's seeded generator

    def acceptance(self, r: Request) -> float:
        """The request's acceptance rate, drawn on its first verify when rates vary."""
        if self.concentration <= 0:
            return self.alpha
        alpha = r.extra.get("acceptance_rate")
        if alpha is None:
            c = self.concentration
            alpha = r.extra["acceptance_rate"] = float(
                self.rng.beta(self.alpha * c, (1.0 - self.alpha) * c))
        return float(alpha)  # type: ignore[arg-type]

    def apply(self, blocks: BlockManager, rows: Sequence[Request], now: float,
              recorder: Recorder) -> list[Request]:
        """Draw each verify row's accepted proposals, emit its tokens at `now`, and trim the
        KV slots of the rejected ones. Returns the requests that finished."""
        k, depth = self.k, self.depth
        alphas = np.array([self.acceptance(r) for r in rows])
        accepted = accepted_counts(self.rng, alphas, depth).tolist()
        counts = [min(a + 1, r.num_remaining_output_tokens) for r, a in zip(rows, accepted)]
        for r, a, n in zip(rows, accepted, counts):
            r.num_spec_steps += 1
            r.num_draft_tokens += depth  # positions proposed (Medusa: one per head)
            r.num_accepted_tokens += a
            r.num_padding_tokens += k + 1 - n  # target positions of rejected / unused drafts
        done = emit_together(list(rows), counts, now, recorder.gaps)
        for r in rows:
            blocks.trim(r.request_id, blocks.num_tokens(r.request_id) - r.num_computed_tokens)
        return done


def build_speculator(k: int, alpha: float, concentration: float, rng: np.random.Generator,
                     instances: Sequence[InstanceInfo], method: str = "draft",
                     tree_size: int = 0) -> Speculator | None:
    """The policy's speculator (None when k = 0); every instance must run a draft model, or
    with method medusa at least k Medusa heads."""
    if k == 0:
        return None
    if method == "medusa":
        for info in instances:
            if info.medusa_heads < k:
                raise ConfigError("num_speculative_tokens", k,
                                  f"instance {info.instance_id} ({info.name or 'unnamed'}) has "
                                  f"{info.medusa_heads} Medusa heads; set cluster.medusa_heads "
                                  f">= {k}")
        return Speculator(tree_size - 1, alpha, concentration, rng, depth=k)
    for info in instances:
        if not info.has_draft:
            raise ConfigError("num_speculative_tokens", k,
                              f"instance {info.instance_id} ({info.name or 'unnamed'}) runs no "
                              f"draft model; set cluster.draft_model (e.g. llama-68m)")
    return Speculator(k, alpha, concentration, rng)
