"""The house's floors: sim/ imports nothing above it, its sub-packages import only the ones their
`__init__.py` allows (docs/architecture.md), and no two modules import each other.

Every module's imports are read with `ast`, those inside functions and `if TYPE_CHECKING:`
blocks included (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import re
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
    assert "sim.measured.calibrated" in graph["sim.cluster.spec"]  # imported inside build_executors
    assert "sim.util.errors" in graph["experiments.sweep.ray_backend"]
    assert "policies.base" in graph["policies.registry"]


def test_sim_imports_nothing_above_it():
    graph = import_graph()
    upward = sorted((m, t) for m, targets in graph.items() if m.split(".")[0] == "sim"
                    for t in targets if t.split(".")[0] in UPPER)
    assert [pair for pair in upward if pair not in KNOWN_UPWARD] == []
    assert set(KNOWN_UPWARD) <= set(upward), "a tolerated import is gone: drop it from the list"


def sim_subpackages() -> dict[str, set[str]]:
    """sim sub-package -> the sub-packages its `__init__.py` docstring says it may import."""
    allowed = {}
    for init in sorted((ROOT / "sim").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        match = re.search(r"May import: (.*?)\.?$", doc, re.S)
        assert match, f"{init}: the docstring must end with 'May import: ...'"
        names = " ".join(match.group(1).split())
        allowed[init.parent.name] = set() if names == "nothing in the project" else \
            {n.strip().removeprefix("sim.") for n in names.split(",")}
    return allowed


def test_every_sim_module_lives_in_a_sub_package():
    top = sorted(p.name for p in (ROOT / "sim").glob("*.py"))
    assert top == ["__init__.py", "compiled.py"]  # the package and its compiled-build loader


def test_sim_sub_packages_import_only_what_they_declare():
    allowed = sim_subpackages()
    assert set().union(*allowed.values()) <= set(allowed), "a declared sub-package is missing"
    graph = import_graph()
    broken = sorted((m, t) for m, targets in graph.items() if m.count(".") >= 2
                    and m.startswith("sim.") for t in targets
                    if t.startswith("sim.") and t.count(".") >= 2
                    and t.split(".")[1] != m.split(".")[1]
                    and t.split(".")[1] not in allowed[m.split(".")[1]])
    assert broken == [], "imports a sub-package its __init__ does not allow"


def test_the_declared_sim_floors_have_no_circle():
    allowed = sim_subpackages()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"circle: {' -> '.join(path + (name,))}"
        if name not in done:
            for below in allowed[name]:
                visit(below, path + (name,))
            done.add(name)

    for name in allowed:
        visit(name, ())
    assert allowed["cost"] <= {"util", "core", "hardware", "models"}  # never the engine


def test_no_two_sub_packages_import_each_other():
    """Sub-packages (sim/engine, experiments/capacity, ...) form floors too: the graph of which
    imports which, over every module in them, has no circle."""
    graph = import_graph()

    def unit(name: str) -> str:  # the sub-package a module lives in (or the module itself)
        parts = name.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else name

    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        units.setdefault(unit(module), set()).update(unit(t) for t in targets)
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"circle: {' -> '.join(path + (name,))}"
        if name not in done:
            for below in sorted(units.get(name, set()) - {name}):
                visit(below, path + (name,))
            done.add(name)

    for name in sorted(units):
        visit(name, ())


def test_no_two_modules_import_each_other():
    graph = import_graph()
    circles = sorted((a, b) for a, targets in graph.items() for b in targets
                     if a < b and a in graph.get(b, set()))
    assert circles == []


def test_sim_simulate_takes_a_factory_and_policies_simulate_a_name():
    import policies.simulate
    import sim.engine.simulate

    assert not hasattr(sim.engine.simulate, "simulate")  # resolving a name needs policies.registry
    assert policies.simulate.RunResult is sim.engine.simulate.RunResult


def test_the_policy_interface_lives_in_sim_and_is_re_exported():
    import policies.base
    import sim.engine.policy

    assert policies.base.Policy is sim.engine.policy.Policy
    assert policies.base.PolicyConfig is sim.engine.policy.PolicyConfig


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
