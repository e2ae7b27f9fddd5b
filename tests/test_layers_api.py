"""lazyrt/api/ is layered: each module imports only modules below it, at the top of
the file, and only by their public names. Read from the source (AST), so a test
fails on the import line that breaks the rule, not on whatever import order
happens to work today."""
import ast
import pathlib

import lazyrt as lr
from layering import circles, import_graph, within

API = pathlib.Path(lr.__file__).parent / "api"
MODULES = sorted(p.stem for p in API.glob("*.py") if p.stem != "__init__")


def _api_imports(tree):
    """``(node, module, names)`` for each import in ``tree`` of a lazyrt.api module;
    ``names`` is None for a whole-module import (``from . import views``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") if node.module else []
            if node.level == 0 and parts[:2] == ["lazyrt", "api"]:
                parts = parts[2:]
            elif node.level == 2 and parts[:1] == ["api"]:
                parts = parts[1:]
            elif node.level != 1:
                continue
            if parts:
                yield node, parts[0], [a.name for a in node.names]
            else:  # from . import views, creation
                for alias in node.names:
                    yield node, alias.name, None
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["lazyrt", "api"] and len(parts) > 2:
                    yield node, parts[2], None


def _trees():
    return {m: ast.parse((API / f"{m}.py").read_text(), filename=f"{m}.py") for m in MODULES}


def _graph():
    return {m: {mod for _, mod, _ in _api_imports(t) if mod in MODULES and mod != m}
            for m, t in _trees().items()}


def test_api_modules_import_no_circle():
    bad = [c for c in circles(import_graph()) if any(within(m, "lazyrt.api") for m in c)
           if not set(c) <= _NAMESPACE_CIRCLE]
    assert not bad, bad


#: the array API's namespace is lazyrt itself: ``__array_namespace__`` returns the
#: package, which imports the API; that one circle is the standard's, not a layering slip
_NAMESPACE_CIRCLE = {"lazyrt", "lazyrt.api.namespace", "lazyrt.api.tensor"}


def test_api_modules_import_each_other_at_top_level_only():
    # a function-local import is how a circle hides: every edge must be visible at the top
    local = []
    for m, tree in _trees().items():
        top = {id(n) for n in tree.body}
        local += [f"{m}.py:{node.lineno} imports {mod}" for node, mod, _ in _api_imports(tree)
                  if mod in MODULES and id(node) not in top]
    assert not local, local


def test_no_private_name_crosses_api_modules():
    crossing = []
    for m, tree in _trees().items():
        aliases = {}
        for node, mod, names in _api_imports(tree):
            if mod not in MODULES or mod == m:
                continue
            crossing += [f"{m}.py:{node.lineno}: {mod}.{n}" for n in names or ()
                         if n.startswith("_") and not n.startswith("__")]
            if names is None:
                aliases.update({a.asname or a.name: mod for a in node.names
                                if (a.name.split(".")[-1]) == mod})
        for node in ast.walk(tree):  # P._helper through a module alias
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                crossing.append(f"{m}.py:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    assert not crossing, crossing


def test_operands_is_the_bottom_of_api():
    assert _graph()["operands"] == set()


def test_views_imports_nothing_above_it():
    # advanced subscripting (take, masks) lives in subscript.py, above these
    assert _graph()["views"] <= {"creation", "operands", "pointwise"}
    assert "views" in _graph()["subscript"]


def test_helpers_stay_out_of_the_lazyrt_namespace():
    from lazyrt.api import operands
    helpers = {n for n in vars(operands) if callable(getattr(operands, n)) and
               getattr(getattr(operands, n), "__module__", "") == operands.__name__}
    assert helpers and not helpers & set(dir(lr))
    assert "as_tensor" not in dir(lr)


def test_fancy_indexing_works_through_the_subscript_module():
    x = lr.arange(6.0)
    assert x[lr.asarray([4, 1])].tolist() == [4.0, 1.0]
    assert x[x > 3].tolist() == [4.0, 5.0]
    x[x > 3] = 0.0
    x[0:2] = 7.0
    assert x.tolist() == [7.0, 7.0, 2.0, 3.0, 0.0, 0.0]
