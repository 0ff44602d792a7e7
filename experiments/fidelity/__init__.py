"""Fidelity of the cost models against measured GPU timings (`python -m experiments.fidelity`):
per-regime tables from operator profiles, end-to-end benchmark tables, and fitting a GPU's stage
parameters."""
