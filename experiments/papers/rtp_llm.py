"""RTP-LLM's two measurements on the simulator (issue 31): the tables of docs/prefix_cache.md
and docs/speculative.md.

    python -m experiments.papers.rtp_llm prefix         # first-token time by input and prefix length
    python -m experiments.papers.rtp_llm speculative    # one speculative round's parts, k = 5

`prefix` takes the cluster and policies of experiments/configs/rtp_llm_prefix.yaml and, for
each (prefix, input) pair, simulates two requests alone on the instance: the first sends the
prefix (and so caches it), the second, 30 s later, the prefix + the input; its TTFT is printed.
`speculative` takes experiments/configs/rtp_llm_speculative.yaml's cluster and prices one round
of each entry with the instance's executor: the k draft iterations, the target's k + 1-token
verify pass, and what the sampler and the score buffer add to them.
"""

from __future__ import annotations

import argparse
from typing import Sequence

import pandas as pd

from experiments.config.load import load_config
from policies.simulate import simulate
from sim.cluster.spec import build_executors
from sim.core.executor import Step

PREFIX_CONFIG = "experiments/configs/rtp_llm_prefix.yaml"
SPEC_CONFIG = "experiments/configs/rtp_llm_speculative.yaml"
PREFIXES = (0, 512, 1024, 2048)  # tokens of reused history
INPUTS = (256, 512, 1024)  # tokens of new input
BLOCK = 16  # tokens per content id (the KV block size)


def prefix_trace(prefix: int, new: int) -> pd.DataFrame:
    """Request 0 sends the prefix, request 1 the prefix + `new` tokens (ids shared)."""
    ids = list(range(prefix // BLOCK))
    fresh = [10**6 + j for j in range(-(-new // BLOCK))]
    rows = [(30.0, prefix + new, 2, ids + fresh, BLOCK)]
    if prefix:
        rows.insert(0, (0.0, prefix, 2, ids, BLOCK))
    return pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens",
                                       "block_ids", "block_tokens"])


def prefix_rows(path: str = PREFIX_CONFIG) -> list[dict]:
    """TTFT (ms) of the second request for every (prefix, input) pair and policy entry."""
    cfg = load_config(path)
    out = []
    for prefix in PREFIXES:
        for new in INPUTS:
            row = {"prefix": prefix, "input": new}
            for entry in cfg.policies:
                execs = build_executors(cfg.cluster_for(entry))
                res = simulate(prefix_trace(prefix, new), entry.name, entry.params, execs)
                last = res.records.sort_values("arrival_s").iloc[-1]
                row[entry.label] = 1e3 * (last.first_token_s - last.arrival_s)
            out.append(row)
    return out


def verify_step(context: int, k: int) -> Step:
    """One request's verify step: k drafted tokens + the target's own, after `context`."""
    return Step(instance_id=0, request_ids=(0,), num_new_tokens=(k + 1,), num_context_tokens=(context,),
                samples=(True,), num_draft_tokens=k, num_verify_seqs=1)


def round_rows(path: str = SPEC_CONFIG, context: int = 600) -> list[dict]:
    """One round (ms) of each speculative entry: draft iterations, target pass, their sum,
    and a plain decode step of the target for comparison."""
    cfg = load_config(path)
    out = []
    for entry in cfg.policies:
        k = int(entry.params.get("num_speculative_tokens", 0))
        ex = build_executors(cfg.cluster_for(entry))[0]
        if not k:
            plain = ex.execute(Step(instance_id=0, request_ids=(0,), num_new_tokens=(1,),
                                    num_context_tokens=(context,), samples=(True,)))
            out.append({"entry": entry.label, "round_ms": 1e3 * plain.duration_s})
            continue
        step = verify_step(context, k)
        draft = ex.draft.draft_seconds(step)
        total = ex.execute(step).duration_s
        out.append({"entry": entry.label, "draft_ms": 1e3 * draft,
                    "target_ms": 1e3 * (total - draft), "round_ms": 1e3 * total})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.papers.rtp_llm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", choices=("prefix", "speculative"))
    args = parser.parse_args(argv)
    rows = prefix_rows() if args.table == "prefix" else round_rows()
    print(pd.DataFrame(rows).round(1).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
