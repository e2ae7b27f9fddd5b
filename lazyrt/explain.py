"""Why a run recompiled, and what forced each barrier.

:func:`diff_graphs` compares two captured graphs and names what differs — an
input's shape or dtype, the op sequence, a baked constant, an op's
attributes — with the user's source line where the difference entered:
``input 0 shape (8, 64) → (16, 64), from train.py:7``. :func:`barrier_origin`
names the user's line (:mod:`lazyrt._frames`'s rule) and the cause (``.item()``,
``.cpu()``, ``print``, ``bool()``, ``lr.sync()``, a graph-size cut, a fallback's
op) of a barrier, through ``lazyrt.torch`` as through the native API.
:class:`Explanation` is a whole run's answer, as the ``lazyrt explain``
command prints it and ``lr.debug.watch()`` hands it to code.

Everything here runs only while an :class:`lazyrt.observe.Observer` watches.
"""
from __future__ import annotations

import ast
import bisect
import dis
import html
import linecache
import os
import sys
import types
from dataclasses import dataclass, field

from . import ops
from ._frames import is_internal, is_lazyrt
from .errors import LazyrtError

#: the lazyrt function the user called -> the cause a barrier is counted under
CAUSES = {
    "materialize": ".numpy()", "item": ".item()", "tolist": ".tolist()",
    "__bool__": "bool()", "__float__": "float()", "__int__": "int()", "__index__": "index",
    "__array__": "np.asarray()", "__str__": "print", "__repr__": "repr", "__format__": "format",
    "__reduce__": "pickle", "__dlpack__": "DLPack", "sync": "lr.sync()",
    "_cut": "graph-size cut", "backend": "lr.backend() switch",
    "_advanced_getitem": "fallback: getitem[advanced]",
}
#: Python builtins the user's line may call that reach a barrier -> the cause
_BUILTIN_CAUSES = {"print": "print", "repr": "repr", "str": "str()", "format": "format",
                   "bool": "bool()", "float": "float()", "int": "int()", "len": "len()",
                   "list": "list()", "tuple": "tuple()", "iter": "iter()"}
#: the user's bytecode at a barrier reached without a call: a truth test, a format
_INSTRUCTION_CAUSES = {"TO_BOOL": "bool()", "UNARY_NOT": "bool()",
                       "FORMAT_VALUE": "format", "FORMAT_SIMPLE": "format",
                       "FORMAT_WITH_SPEC": "format", "CONVERT_VALUE": "format",
                       "BINARY_SUBSCR": "index", "STORE_SUBSCR": "index"}


def barrier_origin(depth: int = 2) -> tuple:
    """``("file:line", cause)`` of the barrier being run: the user's line that
    reached lazyrt (:mod:`lazyrt._frames`'s rule, the recorder's), and the cause:
    the lazyrt entry point it called, or, where the call went through torch
    (``.cpu()``, ``.item()``, ``bool()``, ``print`` of a lazy torch tensor), what
    the user's line did; a barrier a fallback forced names the op."""
    f = sys._getframe(depth)
    entry = forced = None   # entry: the outermost of lazyrt's own frames (not torch's)
    while f is not None and is_internal(f.f_code.co_filename):
        if is_lazyrt(f.f_code.co_filename):
            entry = f
        forced = forced or _fallback_of(f)
        f = f.f_back
    site = f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else None
    if forced:
        return site, forced
    if entry is not None and entry.f_code.co_name in CAUSES:
        return site, CAUSES[entry.f_code.co_name]
    cause = _users_trigger(f) if f is not None else None
    if cause is None and entry is not None:
        cause = _aten_cause(entry) or entry.f_code.co_name
    return site, cause or "?"


#: the aten op a barrier reached lazyrt.torch through -> the user's call that makes it
_ATEN_CAUSES = {"_local_scalar_dense": ".item()", "_to_copy": ".cpu()"}


def _aten_cause(entry):
    """The cause from the aten op at ``lazyrt.torch``'s dispatch entry, where the
    user's line cannot be read (no source; Python 3.10 has no column positions)."""
    if entry.f_code.co_name != "__torch_dispatch__":
        return None
    op = str(entry.f_locals.get("func", "")).split(".")
    return _ATEN_CAUSES.get(op[1]) if len(op) == 3 else None


def _fallback_of(frame):
    """``"fallback: OP"`` when ``frame`` is ``lazyrt.torch``'s counted fallback,
    which computes its inputs (a barrier) before torch runs ``OP`` eagerly."""
    code = frame.f_code
    if code.co_name == "fallback" and code.co_filename == _TORCH_DISPATCH:
        return f"fallback: {frame.f_locals.get('func', '?')}"
    return None


_TORCH_DISPATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch", "dispatch.py")


def _users_trigger(frame):
    """What the user's ``frame`` was doing when it reached a barrier through code
    that is not lazyrt's (torch's C methods and modules): read from the
    instruction it is executing, ``.item()`` for a method call, ``print`` or
    ``bool()`` for a builtin's, ``bool()`` for a truth test (``if loss > 0:``);
    None when it cannot tell."""
    ins = _instruction(frame.f_code, frame.f_lasti)
    if ins is None:
        return None
    if ins.opname in _INSTRUCTION_CAUSES or ins.opname.startswith("POP_JUMP") \
            or ins.opname.startswith("JUMP_IF_"):
        return _INSTRUCTION_CAUSES.get(ins.opname, "bool()")
    if not ins.opname.startswith(("CALL", "PRECALL")):
        return None
    call = _call_expression(frame.f_code, ins)
    if call is None:
        return None
    func = call.func
    if isinstance(func, ast.Name):
        return _BUILTIN_CAUSES.get(func.id, f"{func.id}()")
    if isinstance(func, ast.Attribute):
        owner = func.value
        if isinstance(owner, ast.Name) and isinstance(
                frame.f_globals.get(owner.id), types.ModuleType):
            return f"{owner.id}.{func.attr}()"   # lt.mark_step(), np.asarray()
        return f".{func.attr}()"                 # loss.item(), x.cpu()
    return None


_INSTRUCTIONS: dict = {}   # code -> (offsets, instructions), caches left out


def _instruction(code, offset):
    """The instruction executing at ``offset`` (a frame's ``f_lasti``, which may
    point into the instruction's inline caches)."""
    table = _INSTRUCTIONS.get(code)
    if table is None:
        if len(_INSTRUCTIONS) > 4096:
            _INSTRUCTIONS.clear()
        found = list(dis.get_instructions(code))
        table = _INSTRUCTIONS[code] = ([i.offset for i in found], found)
    k = bisect.bisect_right(table[0], offset) - 1
    return table[1][k] if k >= 0 else None


def _call_expression(code, ins):
    """The ``ast.Call`` the instruction ``ins`` executes, from its source
    positions (None without the source, or before Python 3.11)."""
    pos = getattr(ins, "positions", None)
    if pos is None or pos.lineno is None or pos.col_offset is None \
            or pos.end_col_offset is None:
        return None
    lines = linecache.getlines(code.co_filename)[pos.lineno - 1:pos.end_lineno]
    if not lines:
        return None
    # columns are UTF-8 byte offsets
    raw = [line.encode() for line in lines]
    raw[-1] = raw[-1][:pos.end_col_offset]
    raw[0] = raw[0][pos.col_offset:]
    try:
        tree = ast.parse(b"".join(raw).decode().strip(), mode="eval")
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    return tree.body if isinstance(tree.body, ast.Call) else None


def ran_by(op: str) -> str:
    """Who ran a fallback: ``lazyrt.torch`` counts one under its aten overload
    (``aten.erfc.default``, ``namespace.op.overload``), which torch then ran
    eagerly on the CPU; the native API's (``getitem[advanced]``) ran in NumPy."""
    return "torch, eagerly on the CPU" if op.count(".") >= 2 else "NumPy"


def short(site) -> str:
    """``train.py:7`` for ``/home/me/train.py:7`` (the name users read)."""
    return os.path.basename(site) if site else "<unknown line>"


# --- what differs between two graphs --------------------------------------------

@dataclass(frozen=True)
class Difference:
    """One thing that differs between two graphs, and where it entered."""
    what: str
    source: str | None = None

    def __str__(self):
        return f"{self.what}, from {short(self.source)}" if self.source else self.what


def _leaf_kind(n) -> str:
    return "runtime scalar" if n.op is ops.SCALAR else "tensor"


def _input_numbers(graph) -> dict:
    """node -> "input k" (tensors, numbered in call order) or "scalar k"."""
    out, counts = {}, [0, 0]
    for i in graph.params:
        scalar = graph.nodes[i].op is ops.SCALAR
        out[i] = f"{'scalar' if scalar else 'input'} {counts[scalar]}"
        counts[scalar] += 1
    return out


def _entered(graph, i):
    """Where node ``i`` entered the graph: its own line, else (a tensor made
    outside lazyrt's recording) the line of the first op that reads it."""
    if graph.nodes[i].source:
        return graph.nodes[i].source
    for n in graph.nodes[i + 1:]:
        if i in n.inputs and n.source:
            return n.source
    return None


def _call(graph, i) -> str:
    n = graph.nodes[i]
    return f"{n.op.name}({', '.join(f'%{j}' for j in n.inputs)})"


def diff_graphs(old, new) -> list[Difference]:
    """What differs from ``old`` to ``new`` (two :class:`lazyrt.graph.Graph`),
    most telling first: inputs, then the op sequence, then baked constants
    and op attributes (these only when nothing above explains the change)."""
    out = []
    numbers = _input_numbers(new)
    for i, j in zip(old.params, new.params):
        a, b = old.nodes[i], new.nodes[j]
        name, where = numbers[j], _entered(new, j)
        if a.op is not b.op:
            out.append(Difference(f"{name} was a {_leaf_kind(a)}, now a {_leaf_kind(b)}",
                                  where))
        elif a.shape != b.shape:
            out.append(Difference(f"{name} shape {a.shape} → {b.shape}", where))
        elif a.dtype != b.dtype:
            out.append(Difference(f"{name} dtype {a.dtype_name} → {b.dtype_name}", where))
    if len(old.params) != len(new.params):
        extra = new.params[len(old.params)] if len(new.params) > len(old.params) else None
        out.append(Difference(f"{len(old.params)} inputs → {len(new.params)}",
                              new.nodes[extra].source if extra is not None else None))
    inputs_differ = bool(out)
    on, nn = old.nodes, new.nodes
    for i in range(min(len(on), len(nn))):
        a, b = on[i], nn[i]
        if a.op is not b.op or a.inputs != b.inputs:
            if a.op.kind == ops.LEAF and b.op.kind == ops.LEAF and a.op is not ops.CONST \
                    and b.op is not ops.CONST:
                continue  # a tensor that became a scalar: said above
            out.append(Difference(f"op sequence: %{i} is {_call(new, i)}, was {_call(old, i)}",
                                  b.source))
            return out
    if len(on) != len(nn):
        if len(nn) > len(on):
            i = len(on)
            out.append(Difference(f"{len(on)} nodes → {len(nn)}: new ops from %{i} "
                                  f"{_call(new, i)}", nn[i].source))
        else:
            out.append(Difference(f"{len(on)} nodes → {len(nn)}: the graph ends at "
                                  f"%{len(nn) - 1}", None))
        return out
    consequences = []
    for i, (a, b) in enumerate(zip(on, nn)):
        if a.op is ops.CONST and b.op is ops.CONST and (a.value != b.value or a.dtype != b.dtype):
            consequences.append(Difference(f"baked constant %{i} {a.value!r} → {b.value!r}",
                                           b.source))
        elif a.op.kind != ops.LEAF and a.attrs != b.attrs:
            consequences.append(Difference(
                f"%{i} {b.op.name} attributes {a.attrs} → {b.attrs}", b.source))
        elif a.op.kind != ops.LEAF and a.dtype != b.dtype:
            consequences.append(Difference(
                f"%{i} {b.op.name} dtype {a.dtype_name} → {b.dtype_name}", b.source))
    if not inputs_differ:
        out += consequences[:3]
    if not out and old.outputs != new.outputs:
        out.append(Difference(f"the values computed differ: outputs {list(old.outputs)} → "
                              f"{list(new.outputs)}"))
    return out


# --- a whole run's answer ---------------------------------------------------------

#: differences a recompile's line shows (an optimizer's first step can change dozens)
MAX_SHOWN = 6


@dataclass(frozen=True)
class Recompile:
    """Why graph ``graph_no`` was compiled: what differs from ``previous_no``,
    the nearest earlier graph from the same call site (None: the first)."""
    graph_no: int
    key: int
    site: str | None
    cause: str
    previous_no: int | None
    differences: tuple = ()
    note: str = ""

    @property
    def is_recompile(self) -> bool:
        return self.previous_no is not None

    def __str__(self):
        head = (f"graph {self.graph_no} ({self.key:016x}) at {short(self.site)} "
                f"({self.cause})")
        if self.note:
            return f"{head}: {self.note}"
        if self.previous_no is None:
            return f"{head}: the first graph from this line"
        shown = self.differences[:MAX_SHOWN]
        whats = "; ".join(str(d) for d in shown) or "the graph key differs"
        if len(self.differences) > MAX_SHOWN:  # all of them stay in .differences
            whats += f"; and {len(self.differences) - MAX_SHOWN} more"
        return f"{head}: differs from graph {self.previous_no}: {whats}"


@dataclass(frozen=True)
class Explanation:
    """A run's recompiles, barriers and fallbacks (``lazyrt explain``)."""
    graphs: int                          # distinct graphs compiled
    barriers: int                        # graphs executed
    compiles: tuple = ()                 # Recompile per distinct graph, in order
    causes: tuple = ()                   # (count, cause, site), most frequent first
    fallbacks: tuple = ()                # (count, op, site), most frequent first
    limit: int | None = None             # --max-graphs / LAZYRT_MAX_GRAPHS
    evictions: int = 0                   # programs compiled again after eviction
    notes: tuple = field(default=())

    @property
    def recompiles(self) -> tuple:
        return tuple(c for c in self.compiles if c.is_recompile)

    @property
    def over_limit(self) -> bool:
        return self.limit is not None and self.graphs > self.limit

    def summary(self) -> str:
        n = len(self.recompiles)
        return (f"{_count(self.graphs, 'distinct graph')} ({_count(n, 'recompile')} of a call "
                f"site), {_count(self.barriers, 'graph')} executed")

    def sections(self) -> list:
        """``(title, lines)`` per section, for plain text, HTML and the CLI."""
        out = [("graphs compiled", [str(c) for c in self.compiles] or ["(none)"])]
        out.append(("barriers by cause",
                    _rows(self.causes)
                    or ["(none)"]))
        if self.fallbacks:
            out.append(("fallbacks (ops run eagerly, outside the graph)",
                        _rows(self.fallbacks, lambda op: f"  (run by {ran_by(op)})")))
        notes = list(self.notes)
        if self.evictions:
            notes.append(f"{self.evictions} programs were compiled again after the in-memory "
                         "cache evicted them (raise $LAZYRT_PROGRAM_CACHE_SIZE)")
        if self.over_limit:
            notes.append(f"this run needs more than {self.limit} distinct graphs "
                         f"(--max-graphs / $LAZYRT_MAX_GRAPHS)")
        if notes:
            out.append(("notes", notes))
        return out

    def __str__(self):
        lines = [f"lazyrt explain: {self.summary()}"]
        for title, body in self.sections():
            lines += ["", f"{title}:"] + [f"  {line}" for line in body]
        return "\n".join(lines)

    def _repr_html_(self):
        parts = [f"<b>lazyrt explain</b>: {html.escape(self.summary())}"]
        for title, body in self.sections():
            parts.append(f"<h4>{html.escape(title)}</h4><pre>"
                         + html.escape("\n".join(body)) + "</pre>")
        return "\n".join(parts)


def _rows(counted, after=lambda what: "") -> list:
    """``(count, what, site)`` rows as aligned lines."""
    width = max([26] + [len(what) + 1 for _, what, _ in counted])
    return [f"{n:>6}  {what:<{width}s} {short(site)}{after(what)}" for n, what, site in counted]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


class GraphLimitError(LazyrtError):
    """A run needed more distinct graphs than ``--max-graphs`` /
    ``$LAZYRT_MAX_GRAPHS`` allows; the message says why the last one differs."""

    def __init__(self, limit: int, recompile: Recompile):
        self.limit, self.recompile = limit, recompile
        super().__init__(f"lazyrt: this run needs more than {limit} distinct graph"
                         f"{'s' if limit != 1 else ''} ($LAZYRT_MAX_GRAPHS / --max-graphs): "
                         f"{recompile}")
