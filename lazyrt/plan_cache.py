"""Plans on disk: a process that meets a graph planned before, by this lazyrt,
loads its plan instead of planning it again.

The kernel cache (:mod:`lazyrt.cache`) already keeps the compiled binaries;
planning a large graph (a training step unrolled over many time steps) can
still take seconds, so every plan a backend makes with the default policy is
kept too, in ``<cache>/plans/``, one file per graph:

    <backend>-<graph key>-<digest>.plan

The digest covers what the plan depends on besides the graph: the backend's
:class:`~lazyrt.planner.Capabilities`, the lazyrt version, the Python version,
and the source of the modules that decide a plan (the planner, the op table,
the dtypes, the graph, this file), so a changed planner never reads an old
plan. Kernel comments are written anew on load: they name the lines that
recorded the graph loaded for, which the graph key does not cover. An entry is a header, the SHA-256 of its body, and the body (the plan,
pickled, with ops by name). It is written through :class:`lazyrt.cache.CacheFolder`
(a private folder, atomic writes) and read only from a folder and file that no
other user can write, as binaries are. An entry that does not match its
checksum, does not unpickle, or does not fit the graph it is loaded for (its
parameters, outputs and buffers) is not trusted: the graph is planned again
and the entry written anew. ``LAZYRT_PLAN_CACHE=0`` turns the cache off.

>>> import lazyrt.plan_cache as pc
>>> sorted(pc.counters)
['hits', 'misses', 'rejected', 'written']
"""
from __future__ import annotations

import gc
import hashlib
import io
import os
import pickle
import stat
import sys
from dataclasses import replace

from . import cache, ops
from .errors import LazyrtError
from .planner import KernelStep, MatmulStep, Plan
from .planner.kernel_builder import comment

#: the first line of every entry; a new layout gets a new number
HEADER = b"lazyrt-plan 1\n"
#: what this process did: plans loaded, graphs planned (no usable entry), entries
#: not trusted (and planned again), entries written
counters = {"hits": 0, "misses": 0, "rejected": 0, "written": 0}

_OPS = {op.name: op for op in ops.OPS}
_fingerprint = []


def enabled() -> bool:
    return os.environ.get("LAZYRT_PLAN_CACHE", "1") != "0"


def folder() -> cache.CacheFolder:
    root = cache.cache_root()
    return cache.CacheFolder(os.path.join(root, "plans"), root, what="plans", warn=False)


def fingerprint() -> bytes:
    """What every entry's digest covers besides the graph and capabilities."""
    if not _fingerprint:
        from . import dtypes, graph, planner
        from ._version import __version__
        from .planner import (fusion, kernel_builder, kernel_ir, passes, policy, schedule,
                              strided)
        h = hashlib.sha256(f"{__version__} {sys.version_info[:2]}".encode())
        for mod in (fusion, kernel_builder, kernel_ir, passes, policy, schedule, strided, planner,
                    ops, dtypes, graph, sys.modules[__name__]):
            with open(mod.__file__, "rb") as f:
                h.update(f.read())
        _fingerprint.append(h.digest())
    return _fingerprint[0]


def entry_name(backend: str, graph, capabilities) -> str:
    digest = hashlib.sha256(fingerprint() + repr(capabilities).encode()).hexdigest()[:16]
    return f"{backend}-{graph.key & (2 ** 64 - 1):016x}-{digest}.plan"


class Store:
    """The plans of one backend: what :func:`lazyrt.planner.plan` asks first
    (``load``) and gives what it planned (``save``), inside
    :func:`lazyrt.planner.plan_store`."""

    def __init__(self, backend: str):
        self.backend = backend

    def load(self, graph, capabilities):
        path = folder().find(entry_name(self.backend, graph, capabilities))
        if path is None:
            counters["misses"] += 1
            return None
        got = _read(path, graph)
        if got is None:
            counters["rejected"] += 1
            return None
        counters["hits"] += 1
        return got

    def save(self, graph, capabilities, the_plan):
        try:
            data = _encode(the_plan)
            folder().write(entry_name(self.backend, graph, capabilities), data)
        except (OSError, pickle.PicklingError, LazyrtError):
            return  # not kept: the next process plans again, as without a cache
        counters["written"] += 1


def store(backend: str):
    """A :class:`Store` for ``backend``, or None when the cache is off."""
    return Store(backend) if enabled() else None


# --- the entry's bytes ------------------------------------------------------------

def _op_named(name):
    return _OPS[name]


def _op_by_name(op):
    # ops are the op table's objects (with their lowerings): stored by name, once
    # per entry (a reduced object is memoized, where a persistent id is not)
    return _op_named, (op.name,)


class _Pickler(pickle.Pickler):
    dispatch_table = {ops.OpDef: _op_by_name}


#: what an entry may name besides the planner's own types: a plan holds tuples,
#: numbers, strings, frozensets, and NumPy scalars in constants
_BUILTINS = frozenset(("frozenset", "set", "slice", "complex", "range"))
_NUMPY = frozenset(("scalar", "dtype"))


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        # an entry names only what a plan is made of: anything else is not a plan
        if (module.startswith("lazyrt.planner.") or (module, name) == (__name__, "_op_named")
                or (module == "builtins" and name in _BUILTINS)
                or (module.split(".")[0] == "numpy" and name in _NUMPY)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a plan does not hold {module}.{name}")


def _encode(the_plan) -> bytes:
    out = io.BytesIO()
    collecting = gc.isenabled()
    gc.disable()
    try:
        _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(replace(the_plan, graph=None))
    finally:
        if collecting:
            gc.enable()
    body = out.getvalue()
    return HEADER + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def _read(path: str, graph):
    """The plan in entry ``path`` for ``graph``, or None when it is not to be trusted."""
    try:
        cache.refuse_unsafe_folder(os.path.dirname(path))
        st = os.stat(path)
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None
        with open(path, "rb") as f:
            data = f.read()
    except (OSError, LazyrtError):
        return None
    if not data.startswith(HEADER):
        return None
    digest, _, body = data[len(HEADER):].partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        return None
    collecting = gc.isenabled()
    gc.disable()  # a million small objects, none in a cycle: as while planning
    try:
        the_plan = _Unpickler(io.BytesIO(body)).load()
    except Exception:  # a body that matches its checksum but not this lazyrt
        return None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(the_plan, Plan) or not _fits(the_plan, graph):
        return None
    return replace(the_plan, graph=graph, steps=tuple(_named(st, graph) for st in the_plan.steps))


def _named(step, graph):
    """``step`` with its kernels' comments naming ``graph``'s lines (its nodes
    are the stored plan's; where the user recorded them may differ)."""
    def spec(s):
        return replace(s, comment=comment(s.comment_parts, graph.nodes)) \
            if s.comment_parts else s
    if isinstance(step, KernelStep):
        return KernelStep(spec(step.spec))
    if isinstance(step, MatmulStep) and step.epilogue is not None:
        return replace(step, epilogue=spec(step.epilogue))
    return step


def _fits(the_plan, graph) -> bool:
    """Whether the plan's parameters, outputs and buffers are the graph's."""
    nodes, params = graph.nodes, graph.params
    if (len(the_plan.param_buffers) != len(params) or len(the_plan.scalar_slot) != len(params)
            or len(the_plan.outputs) != len(graph.outputs)):
        return False
    for k, p in enumerate(params):
        if (the_plan.param_buffers[k] == -1) != (nodes[p].op is ops.SCALAR):
            return False
    for b in the_plan.buffers:
        if not 0 <= b.node < len(nodes):
            return False
        n = nodes[b.node]
        if n.dtype != b.dtype or sorted(n.shape) != sorted(b.shape):
            return False
    return all(0 <= o.buffer < len(the_plan.buffers) for o in the_plan.outputs)
