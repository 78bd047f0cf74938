"""The package's layout (issue 22): no import circle among the modules of accounting/ and
model/, no module over 500 lines, model/ reading only the spec from accounting/, and (issue
38) the rooms (top-level folders) stacked on floors with no import running back up.

Read from the source (ast), not by importing: every import statement counts, at module
level, inside a function or under `if TYPE_CHECKING:` alike, and `from pkg import name`
counts as importing pkg.name where that is a module (else as importing pkg).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accounting", "model")
MAX_LINES = 500


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the packages (a package is its
    __init__.py)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports, anywhere in its file."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                here = name.split(".") if is_pkg else name.split(".")[:-1]
                here = here[:len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        for t in targets:
            # the module itself, else its nearest enclosing package that is one of ours
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph(root: Path) -> dict[str, set[str]]:
    known = _modules(root)
    return {name: _imports(name, path, known) for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circle():
    assert _cycles(_graph(ROOT)) == []


def test_the_circle_check_finds_a_circle(tmp_path):
    """A circle through a function-level import and a `from pkg import module`, and one
    through a relative import, are both found; a chain is not a circle."""
    pkg = tmp_path / "accounting"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "model").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from accounting.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from accounting import a\n")
    (pkg / "sub" / "c.py").write_text("from . import d\n")
    (pkg / "sub" / "d.py").write_text("from .c import x\n")
    (pkg / "e.py").write_text("import accounting.a\n")
    assert _cycles(_graph(tmp_path)) == [["accounting.a", "accounting.sub.b"],
                                         ["accounting.sub.c", "accounting.sub.d"]]


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules(ROOT).values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_model_reads_only_the_spec():
    """model/ computes its own shapes: of accounting it imports the spec's config only, so
    the cross-check does not share the formulas it checks (issue 22, Must 3)."""
    graph = _graph(ROOT)
    outside = {(m, t) for m, ts in graph.items() if m.split(".")[0] == "model" for t in ts
               if t.split(".")[0] == "accounting" and t != "accounting.architecture.config"}
    assert outside == set()


# ---- floors (issue 38, Must 2): the rooms of the house stack without an import running up ----
# A room is a top-level folder or module of accounting/ (accounting.planning, accounting.units,
# ...) or model/. Stacking the rooms on floors, each above what it imports, an import that
# points to a room on the same floor or above runs back up. UPWARD counts, over every stacking
# of the rooms, the fewest module imports that must run up: 0 when the rooms' import graph has
# no circle. At 1e8363a it was 8 (six through accounting/present/, whose table, renderer and
# output every stage imported while its answer blocks and DataFrames imported the stages; one
# from cli/ to web/, one from planning/ to literature/); the floors now hold with none.
def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "accounting" and len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The fewest module imports (importer, imported) that run back up in any stacking of
    the rooms: within each circle of rooms, the order that sends the fewest imports up
    (exhaustive over the rooms of the circle, which are few)."""
    from itertools import permutations
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for m, targets in graph.items():
        for t in targets:
            if room(m) != room(t):
                edges.setdefault((room(m), room(t)), []).append((m, t))
    rooms: dict[str, set[str]] = {}
    for a, b in edges:
        rooms.setdefault(a, set()).add(b)
        rooms.setdefault(b, set())
    out = []
    for circle in _cycles(rooms):
        best = None
        for order in permutations(circle):  # order[0] is the top floor
            floor = {r: i for i, r in enumerate(order)}
            up = sorted(mt for (a, b), mts in edges.items() if a in floor and b in floor
                        and floor[b] < floor[a] for mt in mts)
            if best is None or len(up) < len(best):
                best = up
        out += best
    return sorted(out)


def test_no_import_runs_back_up_the_floors():
    assert upward_imports(_graph(ROOT)) == []


def test_the_floor_check_finds_an_upward_import(tmp_path):
    """Two rooms importing each other: the direction with fewer imports is the one that
    runs up (a ground-floor helper reaching up to a stage, say)."""
    pkg = tmp_path / "accounting"
    for sub in ("tables", "planning"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (tmp_path / "model").mkdir()
    (pkg / "planning" / "a.py").write_text("from accounting.tables import t\n")
    (pkg / "planning" / "b.py").write_text("from accounting.tables import t\n")
    (pkg / "tables" / "t.py").write_text("def f():\n    from accounting.planning import a\n")
    assert upward_imports(_graph(tmp_path)) == [("accounting.tables.t", "accounting.planning.a")]


def test_the_architecture_folder_names_its_modules():
    """accounting/architecture/__init__.py lists the folder's modules, the 17 hf_types_*.py
    rows included (issue 38: docstrings had named 4 to 6 of them): a module added or removed
    without the list fails here."""
    folder = ROOT / "accounting" / "architecture"
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    listed = {w for w in doc.split() if w.endswith(".py") and "/" not in w}
    there = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    assert listed == there
