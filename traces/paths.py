"""Where the shared public trace files live, and where their public originals come from.

The project never copies the data: it reads it from `<project root>/../shared/data` or from
the directory named by the `SIMSERVE_DATA_DIR` environment variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sim.util.errors import ConfigError
from traces.files import existing_file

DATA_DIR_ENV = "SIMSERVE_DATA_DIR"


@dataclass(frozen=True)
class SharedTrace:
    """One public trace file under the shared data directory."""

    relpath: str  # path under the data directory
    origin: str  # where the public original lives


SHARED_TRACES: dict[str, SharedTrace] = {
    "azure_conv": SharedTrace(
        "traces/azure_llm_2023_conv.csv",
        "https://github.com/Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv "
        "(CC-BY 4.0)"),
    "azure_code": SharedTrace(
        "traces/azure_llm_2023_code.csv",
        "https://github.com/Azure/AzurePublicDataset data/AzureLLMInferenceTrace_code.csv "
        "(CC-BY 4.0)"),
    "mooncake": SharedTrace(
        "traces/mooncake_conversation.jsonl",
        "https://github.com/kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl "
        "(Apache-2.0)"),
}


def default_data_dir() -> Path:
    """`$SIMSERVE_DATA_DIR`, else `../shared/data` relative to the project root."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_trace_path(name: str, data_dir: str | Path | None = None) -> Path:
    """Path of a shared trace ('azure_conv', 'azure_code', 'mooncake'); it must exist."""
    if name not in SHARED_TRACES:
        raise ConfigError("trace.name", name, f"unknown; known: {', '.join(SHARED_TRACES)}")
    entry = SHARED_TRACES[name]
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    path = root / entry.relpath
    if not path.exists():
        raise FileNotFoundError(
            f"shared trace {name!r} not found at {path}; download the public original from "
            f"{entry.origin} and save it there (or set {DATA_DIR_ENV} to the data directory)")
    return existing_file(path)  # a regular file (TraceError for a FIFO, a device, ...)
