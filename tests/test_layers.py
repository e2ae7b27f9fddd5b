"""Layering rules checked on the source: the modules of ``lazyrt/torch/`` import
one another without a circle, and none imports lazyrt inside a function to dodge one."""
from __future__ import annotations

import ast
from pathlib import Path

from layering import ROOT, circles, import_graph, within

TORCH_DIR = ROOT / "lazyrt" / "torch"


def _imports_inside_functions(path: Path) -> list[int]:
    """The lines of ``path``'s imports of lazyrt (relative ones included) that are
    not at the top of the file. A package's module-level ``__getattr__`` (PEP 562)
    may import the submodule it names: that loads a heavy part on first use (the
    torch.compile backend's functorch), it does not dodge a circle, since the
    submodule imports its siblings and never the package."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "__getattr__" and \
                path.name == "__init__.py":
            top |= {id(n) for n in ast.walk(fn)}
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top
            and (getattr(node, "level", 0) or any(
                (getattr(node, "module", None) or a.name).startswith("lazyrt")
                for a in node.names))]


def test_torch_frontend_has_no_import_cycles():
    nested = {str(p.relative_to(TORCH_DIR)): lines for p in sorted(TORCH_DIR.rglob("*.py"))
              if (lines := _imports_inside_functions(p))}
    assert not nested, f"imports inside functions (dodging a circle?): {nested}"
    graph = import_graph()
    assert "lazyrt.torch.registry" in graph["lazyrt.torch.dispatch"]  # the graph reads them
    bad = [c for c in circles(graph) if any(within(m, "lazyrt.torch") for m in c)]
    assert not bad, f"import circles: {bad}"
