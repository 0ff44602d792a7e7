"""Experiment runners: YAML configs, sweeps, plots."""
