"""YAML for configs, without silent surprises: plain data only, and nothing read two ways.

PyYAML's safe loader builds plain data (no code runs), but it follows YAML 1.1, so values can
be read as something other than what was written, silently. Before anything is built, this
loader refuses, with a ConfigError naming the field path and the text:

- a key given twice in one mapping (the second would replace the first);
- a plain scalar YAML 1.1 reads as something else than it looks: `010` (octal 8), `1:30`
  (base 60: 90), `0b11` (binary), `0o17` (a string in YAML 1.1), and `yes` / `no` / `on` /
  `off` (booleans, also as keys); write `10`, `90`, `true`, or quote the text;
- anchors and aliases that expand to more than MAX_NODES nodes (a "billion laughs") or that
  refer to themselves.

It also reads `1e3` and `1.5e3` as floats (YAML 1.2; PyYAML 1.1 reads them as strings).
Anchors, aliases and `<<` merge keys that stay small keep working.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from sim.util.errors import ConfigError

MAX_NODES = 100_000  # nodes a document may hold once its aliases are expanded
MAX_DEPTH = 64  # nesting depth of mappings and lists
FLOAT_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
SURPRISES = (  # (pattern of a plain scalar, why it is refused)
    (re.compile(r"^[-+]?0[0-9_]+$"), "a leading zero: YAML 1.1 reads it as an octal number "
                                     "(010 is 8); drop the zero, or quote the text"),
    (re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$"),
     "YAML 1.1 reads it as a base-60 number (1:30 is 90); quote the text"),
    (re.compile(r"^[-+]?0[bBoO][0-9_]+$"), "a binary / octal literal; write it in decimal"),
    (re.compile(r"^(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)$"),
     "YAML 1.1 reads yes / no / on / off as booleans; write true or false, or quote the text"),
)


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that also resolves 1e3-style floats (YAML 1.2)."""


StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_EXPONENT,
                                   list("-+0123456789."))


def load_yaml(text: str, name: str, prefix: str = "") -> Any:
    """The data of one YAML document read from `name` (a file, or `--set key`); ConfigError
    naming the field path (under `prefix`) of a duplicate key, a YAML 1.1 surprise or an alias
    bomb, or naming `name` when the text is not YAML."""
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            check_size(node, prefix)
            check_node(node, prefix, 0)
        except ConfigError as err:  # the document itself, not one of its fields
            raise (err if err.field else ConfigError(name, err.value, err.reason)) from None
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(name, _first_line(text), f"not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(name, _first_line(text), "nested too deeply") from None
    finally:
        loader.dispose()


def check_size(root: Node, prefix: str) -> None:
    """ConfigError naming the largest field when the document's aliases expand past MAX_NODES,
    or the field that refers to itself; sizes are computed once per distinct node, so a bomb
    is caught without being expanded."""
    sizes: dict[int, int] = {}

    def size(node: Node, path: str) -> int:
        if id(node) in sizes:
            if sizes[id(node)] < 0:
                raise ConfigError(path, source(node), "refers to itself through a YAML alias")
            return sizes[id(node)]
        sizes[id(node)] = -1  # in progress
        total = 1 + sum(size(child, child_path) for child_path, child in children(node, path))
        sizes[id(node)] = total
        return total

    if size(root, prefix) <= MAX_NODES:
        return
    path, node = prefix, root
    big = [(p, c) for p, c in children(root, prefix) if sizes[id(c)] > MAX_NODES]
    if big:  # the largest field of the document
        path, node = max(big, key=lambda pair: sizes[id(pair[1])])
    raise ConfigError(path, source(node), f"expands to {sizes[id(node)]:,} YAML nodes through "
                                          f"anchors and aliases (at most {MAX_NODES:,})")


def children(node: Node, path: str) -> list[tuple[str, Node]]:
    """(field path, node) of a node's keys, values and items."""
    if isinstance(node, SequenceNode):
        return [(f"{path}[{i}]", item) for i, item in enumerate(node.value)]
    if isinstance(node, MappingNode):
        out = []
        for key, value in node.value:
            name = key.value if isinstance(key, ScalarNode) else "?"
            out += [(join(path, name), key), (join(path, name), value)]
        return out
    return []


def check_node(node: Node, path: str, depth: int) -> None:
    """Duplicate keys and YAML 1.1 surprises anywhere under `node` (named by field path)."""
    if depth > MAX_DEPTH:
        raise ConfigError(path, source(node), f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, ScalarNode):
        check_scalar(node, path)
    elif isinstance(node, MappingNode):
        seen: dict[tuple[str, str], Node] = {}
        for key, value in node.value:
            if isinstance(key, ScalarNode):
                first = seen.setdefault((key.tag, key.value), key)
                if first is not key:
                    raise ConfigError(join(path, key.value), source(value),
                                      f"duplicate key {key.value!r} (lines "
                                      f"{first.start_mark.line + 1} and "
                                      f"{key.start_mark.line + 1}); the second would silently "
                                      f"replace the first")
    for child_path, child in children(node, path):
        check_node(child, child_path, depth + 1)


def check_scalar(node: ScalarNode, path: str) -> None:
    if node.style is not None:  # quoted or block text: a string as written
        return
    for pattern, why in SURPRISES:
        if pattern.match(node.value):
            raise ConfigError(path, node.value, why)


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def source(node: Node, limit: int = 80) -> str:
    """The text a node was read from (cut to `limit` characters)."""
    start, end = node.start_mark, node.end_mark
    buffer = start.buffer if start is not None else None
    if buffer is None or end is None:
        return str(getattr(node, "value", ""))[:limit]
    text = buffer[start.index:end.index].rstrip("\0")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:80] if text.strip() else ""
