"""`servesim`: one installed command whose subcommands forward to the experiment modules.

    servesim run CONFIG [options]      = python -m experiments.run CONFIG [options]
    servesim SUBCOMMAND --help         examples, then the module's own options

Each subcommand hands its arguments unchanged to the module's main(argv); the modules stay
runnable as `python -m experiments.<module>`. Installed by `pip install -e .`
(pyproject.toml [project.scripts]).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Sequence

PROG = "servesim"


@dataclass(frozen=True)
class Subcommand:
    """One subcommand: the module whose main(argv) it calls, and its help text."""

    module: str  # importable module with main(argv: Sequence[str] | None) -> int
    summary: str  # one line for `servesim --help`
    examples: tuple[str, ...]  # command lines shown by `servesim <name> --help`
    fixed_args: tuple[str, ...] = ()  # arguments put before the user's (list: --list)

    def __post_init__(self) -> None:
        if not self.module or not self.examples:
            raise ValueError(f"Subcommand {self.module!r}: module and examples are required")


SUBCOMMANDS: dict[str, Subcommand] = {
    "run": Subcommand("experiments.run", "run a policy x rate x seed sweep from a YAML config", (
        "servesim run experiments/configs/quickstart.yaml",
        "servesim run CONFIG --set cluster.gpu=H100-80GB --set 'request_rates=[2,4,8]' -j 2",
        "servesim run CONFIG --goodput ttft:200 tpot:50 --metric-percentiles 50,90,99",
        "servesim run CONFIG --dataset-name random --random-input-len 1024 "
        "--random-output-len 128 --random-range-ratio 0.5 --num-prompts 500 --request-rate inf",
        "servesim run CONFIG --strict          # exit 1 if any request is rejected",
        "servesim run --calibration cal.json --workload bench.json   # a benchmark's requests")),
    "capacity": Subcommand("experiments.capacity.main",
                           "search each policy's highest rate meeting the config's slo:", (
        "servesim capacity experiments/configs/quickstart.yaml",
        "servesim capacity CONFIG --min-rate 1 --max-rate 64 --rel-tol 0.05")),
    "search": Subcommand("experiments.search.main",
                         "the cheapest deployment (GPU, TP, scheduler, P:D) meeting the slo:", (
        "servesim search experiments/configs/search_llama3_8b.yaml --jobs 2",
        "servesim search CONFIG --dry-run          # enumerate and prune only",
        "servesim search CONFIG --set search.max_gpus=2 --out results/search_2gpu")),
    "plot": Subcommand("experiments.report.plot", "draw a sweep's figures (vs rate, latency CDFs)", (
        "servesim plot results/quickstart",
        "servesim plot results/azure_conv_sweep --rate 3 --formats png")),
    "figures": Subcommand("experiments.figures",
                          "run a docs page's sweeps (missing or stale runs) and draw its figures", (
        "servesim figures --list",
        "servesim figures magnus --jobs 2          # results/magnus, then docs/figures/magnus_*",
        "servesim figures overhead speculative --draw-only --out /tmp/figures")),
    "validate": Subcommand("experiments.validate.main",
                           "compare the calibrated simulator with the real engine", (
        "servesim validate CONFIG --out results/validate",
        "servesim validate CONFIG --calibration calib.json")),
    "list": Subcommand("experiments.run", "list policies, models, GPUs and trace formats",
                       ("servesim list",), fixed_args=("--list",)),
    "regression": Subcommand("experiments.regression",
                             "compare every policy's metrics with the committed baseline", (
        "servesim regression --jobs 2",
        "servesim regression --update-baselines   # after an intended change")),
    "fidelity": Subcommand("experiments.fidelity.main",
                           "cost model vs measured timings of a profile folder", (
        "servesim fidelity ../shared/data/profiles",
        "servesim fidelity ../shared/data/profiles --cost-model roofline --gpu A100-80GB")),
    "fidelity-e2e": Subcommand("experiments.fidelity.e2e",
                               "cost model vs measured end-to-end engine step times", (
        "servesim fidelity-e2e perf_model.csv               # splitwise-sim's layout",
        "servesim fidelity-e2e perf_model.csv --set cpu_launch_per_layer_s=5.5e-4 "
        "--model bloom-176b=configs/bloom")),
    "calibrate": Subcommand("experiments.bench.calibrate",
                            "fit a calibration file to a vllm/sglang benchmark result", (
        "servesim calibrate bench.json --model llama-2-7b --gpu A100-80GB --out cal.json",
        "servesim run --calibration cal.json --workload bench.json      # its own requests",
        "servesim run --calibration cal.json --workload bench.json --request-rate 8")),
    "bench-calibrate": Subcommand("experiments.bench.calibrate",
                                  "the same as calibrate (its earlier name)", (
        "servesim bench-calibrate result.json --model llama-2-7b --gpu A100-80GB",
        "servesim bench-calibrate r2.json r4.json --model llama-2-7b --gpu A100-80GB "
        "--format vllm --out fit.json")),
}


def usage() -> str:
    """The top-level help: every subcommand with its summary, and examples."""
    width = max(map(len, SUBCOMMANDS))
    lines = [f"usage: {PROG} SUBCOMMAND [ARGS ...]   ({PROG} SUBCOMMAND --help for its options)",
             "", "subcommands:"]
    lines += [f"  {name:<{width}}  {sub.summary}" for name, sub in SUBCOMMANDS.items()]
    lines += ["", "examples:", f"  {PROG} list",
              f"  {PROG} run experiments/configs/quickstart.yaml",
              f"  {PROG} plot results/quickstart"]
    return "\n".join(lines)


def subcommand_help(name: str, sub: Subcommand) -> str:
    """The examples printed before a subcommand's own --help."""
    forwarded = f"python -m {sub.module} {' '.join(sub.fixed_args)}".rstrip()
    lines = [f"{PROG} {name}: {sub.summary} (= {forwarded})", "", "examples:"]
    lines += [f"  {example}" for example in sub.examples]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch `servesim SUBCOMMAND ARGS...`; returns the subcommand's exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        if not args:
            return 2
        raise SystemExit(0)
    name, rest = args[0], args[1:]
    sub = SUBCOMMANDS.get(name)
    if sub is None:
        print(f"{PROG}: unknown subcommand {name!r}; one of {', '.join(SUBCOMMANDS)}",
              file=sys.stderr)
        return 2
    if "-h" in rest or "--help" in rest:
        print(subcommand_help(name, sub))
        if sub.fixed_args:  # list takes no options of its own
            raise SystemExit(0)
        rest = ["--help"]
    module = importlib.import_module(sub.module)
    return int(module.main([*sub.fixed_args, *rest]) or 0)


if __name__ == "__main__":
    sys.exit(main())
