"""The package's layout (issue 22): no import circle among the modules of accounting/ and
model/, no module over 500 lines, and model/ reading only the spec from accounting/.

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
               if t.split(".")[0] == "accounting" and t != "accounting.spec.config"}
    assert outside == set()
