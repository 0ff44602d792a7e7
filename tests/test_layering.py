"""The house's floors: sim/ imports nothing above it, and no two modules import each other.

Every module's imports are read with `ast`, those inside functions and `if TYPE_CHECKING:`
blocks included (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "policies", "experiments", "real", "traces", "benchmarks")
UPPER = ("policies", "experiments", "real", "traces")  # what sim/ may never import
# (importer, imported) pairs tolerated, each with why; none are, keep it empty
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imported_names(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """Dotted names `path` imports anywhere in its body (relative imports resolved)."""
    out: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known)
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The project module `name` refers to (a name inside a module counts as the module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports."""
    known = _modules()
    graph = {}
    for name, path in known.items():
        targets = {_resolve(n, known) for n in _imported_names(path, name, known)}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def test_the_graph_sees_lazy_and_type_checking_imports():
    graph = import_graph()
    assert "sim.calibrated" in graph["sim.cluster"]  # imported inside build_executors
    assert "sim.errors" in graph["experiments.ray_backend"]
    assert "policies.base" in graph["policies.registry"]


def test_sim_imports_nothing_above_it():
    graph = import_graph()
    upward = sorted((m, t) for m, targets in graph.items() if m.split(".")[0] == "sim"
                    for t in targets if t.split(".")[0] in UPPER)
    assert [pair for pair in upward if pair not in KNOWN_UPWARD] == []
    assert set(KNOWN_UPWARD) <= set(upward), "a tolerated import is gone: drop it from the list"


def test_no_two_modules_import_each_other():
    graph = import_graph()
    circles = sorted((a, b) for a, targets in graph.items() for b in targets
                     if a < b and a in graph.get(b, set()))
    assert circles == []


def test_sim_simulate_takes_a_factory_and_policies_simulate_a_name():
    import policies.simulate
    import sim.simulate

    assert not hasattr(sim.simulate, "simulate")  # resolving a name needs policies.registry
    assert policies.simulate.RunResult is sim.simulate.RunResult


def test_the_policy_interface_lives_in_sim_and_is_re_exported():
    import policies.base
    import sim.policy

    assert policies.base.Policy is sim.policy.Policy
    assert policies.base.PolicyConfig is sim.policy.PolicyConfig


def test_no_module_switches_the_matplotlib_backend():
    """A module that calls matplotlib.use() takes the figures away from a notebook that
    imports it (issue 26): the backend is the user's, or matplotlib's headless default."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", ".git", ".compiled", "results") or "site-packages" in \
                rel.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "use" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("matplotlib", "mpl")):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, offenders
