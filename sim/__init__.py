"""Discrete-event simulator of LLM inference serving (no torch here)."""
