"""Capacity search: each policy's highest request rate whose SLO is met (`python -m
experiments.capacity`, `servesim capacity`): probes, the rate search, per-class SLOs, its table
and figure."""
