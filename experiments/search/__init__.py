"""Deployment search (`python -m experiments.search CONFIG`, `servesim search`): the cheapest
deployment of one model that meets an SLO on one workload.

It owns the search config (`search:` section: GPU types, tensor parallelism, schedulers, batch
caps, disaggregated P:D ratios with per-pool TP, a GPU budget per unit, a target rate), the
enumeration of candidates (each one capacity-config policy entry with its own `cluster:`
overrides), the pruning before any simulation (does not fit in memory; a lower bound of TTFT or
TPOT already past the SLO), the resume of finished candidates, the ranking (capacity per GPU,
per dollar, replicas for a target rate), and the outputs (search.csv / search.json, the printed
table, pareto.png, one runnable experiment config per candidate). The rate search itself is the
capacity search's (experiments/capacity: one `run_capacity` call over every surviving
candidate). Docs: docs/search.md.
"""
