"""The floors of lazyrt's core, read from the source (``ast``, nothing imported).

A module imports only modules below it. The floors, bottom up: the dtype rules
and the lowering vocabularies (``lazyrt/lowering/``: how each op is written in
C, Triton and JAX), then the op table (``lazyrt/ops.py``), the planner, the
emitters (``codegen/``, installed as ``lazyrt.codegen``), the backends; the API
and the torch front-end on top. The rules (README, "What is where"):

* nothing below ``ops.py`` imports above it;
* backends never import the API or the torch front-end;
* codegen never imports backends;
* no import circles between files (held here for the floors up to the
  emitters: :data:`CIRCLE_FREE`).

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

#: the floor under the op table: what ``lazyrt/ops.py`` may import, and all that
#: those may import
OPS_FLOOR = {"lazyrt.ops", "lazyrt.dtypes", "lazyrt.errors", "lazyrt.lowering",
             "lazyrt.lowering.c", "lazyrt.lowering.triton", "lazyrt.lowering.jax"}


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


def _below(graph, start) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        m = stack.pop()
        if m not in seen:
            seen.add(m)
            stack.extend(graph.get(m, ()))
    return seen


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_reads_the_imports_it_should():
    """A check on the checker: known imports are found (relative, absolute, a
    ``from package import module``, Cython), so the rules below cannot pass empty."""
    graph = import_graph()
    assert "lazyrt.lowering.c" in graph["lazyrt.ops"]
    assert "lazyrt.lowering" in graph["lazyrt.lowering.c"]  # from . import EmitError
    assert "lazyrt.planner.kernel_ir" in graph["lazyrt.codegen.c"]
    assert "lazyrt.codegen.c_reduce" in graph["lazyrt.codegen.c"]
    assert "lazyrt.ops" in graph["lazyrt._recorder"]
    assert "lazyrt.codegen.triton" in graph["lazyrt.backends.triton"]  # a function's import
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_ops_floor_imports_nothing_above():
    """``ops.py`` and all it imports, directly or not, stay on its floor: the
    dtype rules and the lowering vocabularies, never the planner, the emitters or
    anything above them."""
    graph = import_graph()
    below = _below(graph, "lazyrt.ops")
    assert below <= OPS_FLOOR, sorted(below - OPS_FLOOR)
    for module in graph:
        if _in(module, "lazyrt.lowering"):
            assert _below(graph, module) <= OPS_FLOOR - {"lazyrt.ops"}, module


def test_codegen_never_imports_backends():
    graph = import_graph()
    bad = {(m, d) for m, deps in graph.items() if _in(m, "lazyrt.codegen")
           for d in deps if _in(d, "lazyrt.backends")}
    assert not bad, sorted(bad)
    assert any(_in(m, "lazyrt.codegen") for m in graph)


def test_backends_never_import_the_api_or_the_torch_front_end():
    graph = import_graph()
    bad = {(m, d) for m, deps in graph.items() if _in(m, "lazyrt.backends")
           for d in deps if _in(d, "lazyrt.api") or _in(d, "lazyrt.torch")}
    assert not bad, sorted(bad)


def _circles(graph) -> list[list[str]]:
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


#: the floors this file holds free of import circles: the op table's, the planner,
#: the emitters and the hand-written kernels; and below (:data:`UNTANGLED`) the rooms
#: under the API (lazyrt/__init__.py and the API's namespace and tensor still import
#: each other in a circle)
CIRCLE_FREE = ("lazyrt.ops", "lazyrt.dtypes", "lazyrt.errors", "lazyrt.lowering",
               "lazyrt.planner", "lazyrt.codegen", "lazyrt.kernels")

#: the rooms under the API, untangled: none of them is in an import circle
UNTANGLED = ("lazyrt.performance_warning", "lazyrt._frames", "lazyrt._version",
             "lazyrt.cache", "lazyrt.plan_cache", "lazyrt.metrics", "lazyrt.debug_sink",
             "lazyrt.debug", "lazyrt.observe", "lazyrt.compile_record", "lazyrt.runtime",
             "lazyrt.backends")

#: modules at the bottom: each imports no lazyrt module but these (so anything may
#: import them without a way back)
BOTTOM = {"lazyrt.errors", "lazyrt._frames", "lazyrt._version", "lazyrt.performance_warning",
          "lazyrt.compile_record", "lazyrt.debug_sink"}


def test_no_import_circles_through_the_op_table_planner_or_codegen():
    circles = _circles(import_graph())
    bad = [c for c in circles if any(_in(m, f) for m in c for f in CIRCLE_FREE)]
    assert not bad, bad


def test_no_import_circles_through_the_runtime_cache_metrics_debug_or_backends():
    """The helpers live where they are used from: the cache, the metrics, the
    debug sink, the runtime and the backends import one another one way only."""
    graph = import_graph()
    for module in ("lazyrt.runtime", "lazyrt.metrics", "lazyrt.debug_sink", "lazyrt.cache",
                   "lazyrt.backends", "lazyrt.backends.triton", "lazyrt.backends.gather_scatter"):
        assert module in graph, module
    circles = _circles(graph)
    bad = [c for c in circles if any(_in(m, f) for m in c for f in UNTANGLED)]
    assert not bad, bad


def test_the_bottom_helpers_import_only_the_bottom():
    """Warnings, the frame rule, the version, the compile record and the debug sink
    import nothing above them; the metrics import neither the runtime nor the
    backends, the cache no backend, the sink no runtime."""
    graph = import_graph()
    for module in BOTTOM:
        assert _below(graph, module) <= BOTTOM, (module, sorted(_below(graph, module) - BOTTOM))
    for module, above in (("lazyrt.metrics", ("lazyrt.runtime", "lazyrt.backends")),
                          ("lazyrt.cache", ("lazyrt.runtime", "lazyrt.backends", "lazyrt")),
                          ("lazyrt.debug_sink", ("lazyrt.runtime", "lazyrt.debug"))):
        reached = _below(graph, module)
        assert not [m for m in reached for a in above if m == a or (
            a != "lazyrt" and _in(m, a))], (module, sorted(reached))
