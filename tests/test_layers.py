"""Layering rules checked on the source: the modules of ``lazyrt/torch/`` import
one another without a circle, and none imports inside a function to dodge one."""
from __future__ import annotations

import ast
from pathlib import Path

import lazyrt

TORCH_DIR = Path(lazyrt.__file__).parent / "torch"


def _module_name(path: Path) -> str:
    parts = ("lazyrt",) + path.relative_to(TORCH_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules):
    """The ``lazyrt.torch`` modules ``path`` imports, and the line of every import of
    lazyrt inside a function or class."""
    tree = ast.parse(path.read_text())
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found, nested = set(), []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            # ``from pkg import sub`` imports the submodule ``pkg.sub``
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules
                       else source for a in node.names]
        ours = {t for t in targets if t in modules and t != name}
        if node not in tree.body and (ours or node.level or (
                node.module or "").startswith("lazyrt")):
            nested.append(node.lineno)
        found.update(ours)
    return found, nested


def _cycle(graph):
    """One import circle of ``graph`` (module -> imported modules), or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None
    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_torch_frontend_has_no_import_cycles():
    paths = sorted(TORCH_DIR.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph, nested = {}, {}
    for p in paths:
        graph[_module_name(p)], lines = _imports(p, modules)
        if lines:
            nested[str(p.relative_to(TORCH_DIR))] = lines
    assert not nested, f"imports inside functions (dodging a circle?): {nested}"
    assert _cycle(graph) is None, f"import circle: {' -> '.join(_cycle(graph))}"
    # the registry is the bottom of the lowerings: it imports none of them
    assert graph["lazyrt.torch.registry"] == set()
