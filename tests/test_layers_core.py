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

from layering import below, circles, import_graph, within

#: the floor under the op table: what ``lazyrt/ops.py`` may import, and all that
#: those may import
OPS_FLOOR = {"lazyrt.ops", "lazyrt.op_def", "lazyrt.dtypes", "lazyrt.errors", "lazyrt.lowering",
             "lazyrt.lowering.c", "lazyrt.lowering.triton", "lazyrt.lowering.jax"}


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
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_ops_floor_imports_nothing_above():
    """``ops.py`` and all it imports, directly or not, stay on its floor: the
    dtype rules and the lowering vocabularies, never the planner, the emitters or
    anything above them."""
    graph = import_graph()
    reached = below(graph, "lazyrt.ops")
    assert reached <= OPS_FLOOR, sorted(reached - OPS_FLOOR)
    for module in graph:
        if within(module, "lazyrt.lowering"):
            assert below(graph, module) <= OPS_FLOOR - {"lazyrt.ops"}, module


def test_codegen_never_imports_backends():
    graph = import_graph()
    bad = {(m, d) for m, deps in graph.items() if within(m, "lazyrt.codegen")
           for d in deps if within(d, "lazyrt.backends")}
    assert not bad, sorted(bad)
    assert any(within(m, "lazyrt.codegen") for m in graph)


def test_backends_never_import_the_api_or_the_torch_front_end():
    graph = import_graph()
    bad = {(m, d) for m, deps in graph.items() if within(m, "lazyrt.backends")
           for d in deps if within(d, "lazyrt.api") or within(d, "lazyrt.torch")}
    assert not bad, sorted(bad)


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
    found = circles(import_graph())
    bad = [c for c in found if any(within(m, f) for m in c for f in CIRCLE_FREE)]
    assert not bad, bad


def test_no_import_circles_through_the_runtime_cache_metrics_debug_or_backends():
    """The helpers live where they are used from: the cache, the metrics, the
    debug sink, the runtime and the backends import one another one way only."""
    graph = import_graph()
    for module in ("lazyrt.runtime", "lazyrt.metrics", "lazyrt.debug_sink", "lazyrt.cache",
                   "lazyrt.backends", "lazyrt.backends.triton", "lazyrt.backends.gather_scatter"):
        assert module in graph, module
    found = circles(graph)
    bad = [c for c in found if any(within(m, f) for m in c for f in UNTANGLED)]
    assert not bad, bad


def test_the_bottom_helpers_import_only_the_bottom():
    """Warnings, the frame rule, the version, the compile record and the debug sink
    import nothing above them; the metrics import neither the runtime nor the
    backends, the cache no backend, the sink no runtime."""
    graph = import_graph()
    for module in BOTTOM:
        assert below(graph, module) <= BOTTOM, (module, sorted(below(graph, module) - BOTTOM))
    for module, above in (("lazyrt.metrics", ("lazyrt.runtime", "lazyrt.backends")),
                          ("lazyrt.cache", ("lazyrt.runtime", "lazyrt.backends", "lazyrt")),
                          ("lazyrt.debug_sink", ("lazyrt.runtime", "lazyrt.debug"))):
        reached = below(graph, module)
        assert not [m for m in reached for a in above if m == a or (
            a != "lazyrt" and within(m, a))], (module, sorted(reached))
