"""The import graph of lazyrt read from its source (``ast`` for ``.py``, a regex for
``.pyx``; nothing imported), for the layering tests (``test_layers*.py``).

Every import counts, a function's own included (one there would only hide a
circle); imports under ``if TYPE_CHECKING:`` never run and do not.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: installed name -> folder of lazyrt's packages that live at the top of the checkout
_TOP = {"lazyrt.codegen": "codegen", "lazyrt.kernels": "kernels"}



def _module_file(name: str) -> Path | None:
    """The source file of lazyrt module ``name`` (``.py``, ``.pyx`` or a package's
    ``__init__.py``), or None for a name that is not a lazyrt module."""
    if name != "lazyrt" and not name.startswith("lazyrt."):
        return None
    base = ROOT / "lazyrt"
    parts = name.split(".")[1:]
    for installed, folder in _TOP.items():
        if name == installed or name.startswith(installed + "."):
            base, parts = ROOT / folder, name.split(".")[2:]
    path = base.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path.with_suffix(".pyx"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    top = {folder: installed for installed, folder in _TOP.items()}
    head = top.get(parts[0], parts[0]).split(".")
    parts = head + parts[1:]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _targets(module: str, names) -> list[str]:
    """What ``from module import names`` loads: each name that is a module of its
    own, else ``module`` itself."""
    out = [f"{module}.{n}" for n in names if _module_file(f"{module}.{n}")]
    if len(out) < len(names):
        out.append(module)
    return out


def _resolve(package: str, level: int, module: str | None) -> str:
    if not level:
        return module or ""
    base = package.split(".")
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _type_checking(node) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _python_imports(path: Path, package: str) -> set[str]:
    out, stack = set(), [ast.parse(path.read_text(), str(path))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(package, node.level, node.module)
            out.update(_targets(module, [a.name for a in node.names]))
        stack.extend(ast.iter_child_nodes(node))
    return out


_PYX_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+(c?import)[ \t]+([^\n]*)", re.M)
_PYX_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+)", re.M)


def _cython_imports(path: Path, package: str) -> set[str]:
    """The Python imports of a ``.pyx`` file (``cimport`` lines are C-level and
    name ``.pxd`` declarations, resolved when the extension is built)."""
    text = re.sub(r"#.*", "", path.read_text())
    text = re.sub(r"\(([^)]*)\)", lambda m: "(" + m.group(1).replace("\n", " ") + ")", text)
    out = set()
    for dots, module, keyword, names in _PYX_FROM.findall(text):
        if keyword == "cimport":
            continue
        resolved = _resolve(package, len(dots), module or None)
        names = [n.split(" as ")[0].strip() for n in names.strip("() ").split(",") if n.strip()]
        out.update(_targets(resolved, names))
    out.update(_PYX_IMPORT.findall(text))
    return out


def import_graph() -> dict[str, set[str]]:
    """lazyrt module -> the lazyrt modules its file imports."""
    files = [p for folder in ("lazyrt", *_TOP.values())
             for p in sorted((ROOT / folder).rglob("*")) if p.suffix in (".py", ".pyx")]
    graph = {}
    for path in files:
        name = _module_name(path)
        package = _package(name, path)
        reader = _cython_imports if path.suffix == ".pyx" else _python_imports
        graph[name] = {m for m in reader(path, package) if _module_file(m) and m != name}
    return graph


def below(graph, start) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        m = stack.pop()
        if m not in seen:
            seen.add(m)
            stack.extend(graph.get(m, ()))
    return seen


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def circles(graph) -> list[list[str]]:
    """The strongly connected groups of ``graph`` with more than one module
    (Tarjan's algorithm): each file in one imports, through the others, itself."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(m):
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for d in graph.get(m, ()):
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in on_stack:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            group = []
            while not group or group[-1] != m:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                out.append(sorted(group))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return out
