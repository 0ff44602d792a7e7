"""`workload.plugin_calls` and `workload.ptuning`: RTP-LLM's plugin-call and P-tuning session
patterns (traces/plugin_calls.py, traces/ptuning.py; docs/workloads.md). Their fields are the
configs' own, lengths as LengthDist mappings, except the rate, which comes from request_rates."""

from __future__ import annotations

import dataclasses
from typing import Any

from experiments.config.checks import mapping
from sim.util.errors import ConfigError
from sim.util.schema import build
from traces.lengths import LengthDist
from traces.plugin_calls import PluginCallConfig
from traces.ptuning import PTuningConfig

LENGTH_FIELDS = {"plugin_calls": ("user_input", "call_output", "tool_result", "output"),
                 "ptuning": ("input", "output")}  # fields read as LengthDist mappings
CLASSES = {"plugin_calls": PluginCallConfig, "ptuning": PTuningConfig}


def rtp_from_dict(kind: str, value: object) -> Any:
    """`workload.<kind>` (plugin_calls or ptuning) from its YAML mapping."""
    where = f"workload.{kind}"
    fields = mapping(where, value)
    if "rate_per_s" in fields:
        raise ConfigError(f"{where}.rate_per_s", fields["rate_per_s"],
                          "set the request rate with request_rates")
    for name in LENGTH_FIELDS[kind]:
        if fields.get(name) is not None:
            fields[name] = build(LengthDist, f"{where}.{name}",
                                 mapping(f"{where}.{name}", fields[name]), "length.")
    return build(CLASSES[kind], where, fields, f"{kind}.")


def rtp_at_rate(cfg: Any, rate: float, where: str) -> Any:
    """The plugin-call or P-tuning workload at `rate` requests per second."""
    try:
        return dataclasses.replace(cfg, rate_per_s=rate)
    except ConfigError as err:
        raise ConfigError(where, rate, str(err)) from None
