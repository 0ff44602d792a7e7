"""Request arrival traces: one schema, loaders for public formats, synthetic generators.

Modules: `schema` (the DataFrame schema and validation), `azure` / `mooncake` / `generic`
(loaders), `registry` (`load_trace` with format inference), `paths` (shared data files),
`arrivals` / `lengths` / `synthetic` / `transform` (seeded generators and re-timing).
"""

from traces.registry import TRACE_FORMATS, load_trace
from traces.schema import trace_stats, validate_trace
from traces.synthetic import LENGTH_PRESETS, LengthDist, SyntheticConfig, synthetic_trace

__all__ = ["LENGTH_PRESETS", "LengthDist", "SyntheticConfig", "TRACE_FORMATS", "load_trace",
           "synthetic_trace", "trace_stats", "validate_trace"]
