"""Reading JSON files that configs name (calibrations, model config.json): data, never code.

Every way such a file can be wrong (missing, a folder, binary, truncated, not UTF-8, a JSON list
where an object belongs) is a `ConfigError` naming the config field and the path, never a
KeyError / JSONDecodeError / UnicodeDecodeError traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from sim.util.errors import ConfigError

MAX_JSON_BYTES = 256 * 2**20  # bytes: a larger file is refused before it is read


def read_json_object(path: str | Path, field: str, what: str) -> dict[str, Any]:
    """The JSON object in `path`; ConfigError(field, path, ...) unless the file holds one.

    `what` names the kind of file in messages ("calibration file", "config.json")."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(field, str(path), f"not a {what}: no such file")
    if file.stat().st_size > MAX_JSON_BYTES:
        raise ConfigError(field, str(path), f"not a {what}: larger than {MAX_JSON_BYTES} bytes")
    try:
        data = json.loads(file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(field, str(path), f"not a JSON {what}: {exc}") from None
    except OSError as exc:
        raise ConfigError(field, str(path), f"cannot read the {what}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(field, str(path), f"not a {what}: holds a JSON "
                          f"{type(data).__name__}, not an object")
    return data


def section(data: Mapping[str, Any], key: str, field: str, path: str | Path,
            what: str) -> dict[str, Any]:
    """`data[key]` as a dict; ConfigError(field, path, ...) naming the key otherwise."""
    value = data.get(key)
    if value is None:
        raise ConfigError(field, str(path), f"{what} has no {key!r} section")
    if not isinstance(value, dict):
        raise ConfigError(field, str(path), f"{what}'s {key!r} must be a JSON object, got "
                          f"{type(value).__name__}")
    return value


def int_value(value: Any, field: str, reason_where: str = "") -> int:
    """`value` as an int (JSON 4096 or 4096.0); ConfigError(field, value, ...) otherwise."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        ok, value = True, int(value)
    if not ok:
        raise ConfigError(field, value, f"must be an integer{reason_where}")
    return int(value)
