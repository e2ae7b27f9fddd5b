"""KernelSpec: the kernel IR between the planner and the emitters.

One KernelSpec is one fused kernel. It iterates over a ``domain`` (sizes per
axis); ``reduce_axes`` are the axes reduced inside the kernel (empty for a
pointwise kernel), all other axes are *outer* (parallel) axes. The body is a
list of SSA statements:

  ``load``    element of input ``attr`` at the current domain point
  ``gather``  element of input ``attr[0]`` at the current domain point moved
              along the gathered axis by its argument, a loaded index:
              ``attr = (input, axis stride, axis size, negative, axis, indices'
              shape)``; the input's index map has stride 0 along that axis. An
              index counts from the end when negative (if ``negative``) and is
              clamped into the axis; the launch checked the range first
              (:func:`gather_checks`), so the clamp only keeps reads in bounds
  ``scalar``  runtime scalar parameter number ``attr``
  ``const``   a literal (``attr`` is the value)
  ``reduce``  ``attr`` names the reduction (sum, max, ...); its argument is
              evaluated over the reduce axes and its result is one value per
              outer point, usable by later statements; ``acc`` is the dtype
              every backend accumulates in (the op table's policy)
  ``scan``    a running combine along the one reduce axis (a *scan kernel*,
              :func:`is_scan`): ``attr = (op, include_initial)``, ``op`` the
              op table's scan (``op.combine`` is ``Combine.SUM`` or ``Combine.PROD``); its value
              at each element combines the argument up to and including that
              element, in ``acc`` (its dtype). An
              output that stores a scan's value (or a cast of it) under
              include_initial also gets the identity at element -1 of the axis
              (its index map is offset one element along it).
  anything else: ``op`` is a pointwise op's entry in the op table
              (:class:`lazyrt.ops.OpDef`, with its lowering per target;
              ``cast``'s attr is the dtype)

A float16 value is held in float32 and is always exactly a float16: an op
whose result is float16 computes in float32 and a ``cast`` to float16 rounds
it (:data:`COMPUTED_IN`; the planner's pass ``passes.round_float16`` writes
the casts, so an emitter lowers casts and never rounds on its own). An op's
operands may be float16 values of a float32 op: they widen exactly.

``outputs`` store SSA values through index maps. An output whose value is
row-level (depends only on outer axes: a reduction result) is stored once
per outer point; its index map has stride 0 on the reduce axes.

Emitters decide the loop structure from this, through one layout that both
read (``codegen/layout.py``: a reduction whose argument uses another
reduction runs in a later pass over the row); they never see the graph.
Sizes, strides and offsets are data here: the C emitter turns the ones that
are not 0 or 1 into runtime arguments, so a new batch size reuses the
compiled binary.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import dtypes as D
from ..ops import CHECKED_NAMES, index_error

#: dtypes whose arithmetic runs in a wider dtype, rounded back after every op
#: as NumPy's float16 loops (and ml_dtypes' bfloat16 ones) do: both in float32
COMPUTED_IN = {D.FLOAT16: D.FLOAT32, D.BFLOAT16: D.FLOAT32}


@dataclass(frozen=True)
class IndexMap:
    """Element offset of domain point i in a buffer: offset + sum(i[k] * strides[k])."""
    offset: int
    strides: tuple


@dataclass(frozen=True)
class KernelInput:
    buffer: int               # program buffer number
    dtype: int
    index: IndexMap


@dataclass(frozen=True)
class KernelOutput:
    buffer: int
    dtype: int
    index: IndexMap
    value: int                # SSA id stored


@dataclass(frozen=True)
class Stmt:
    id: int
    op: object                # "load" "scalar" "const" "reduce", or a pointwise OpDef
    dtype: int
    args: tuple = ()
    attr: object = None
    acc: int | None = None    # reduce: the accumulator dtype

    def __str__(self):
        args = ", ".join(f"v{a}" for a in self.args)
        attr = "" if self.attr is None else (f"[{self.attr}]" if not args else f", {self.attr!r}")
        acc = "" if self.acc is None else f" acc {D.NAMES[self.acc]}"
        return f"v{self.id}: {D.NAMES[self.dtype]} = {self.op}({args}{attr}){acc}"


@dataclass(frozen=True)
class KernelSpec:
    name: str
    domain: tuple
    reduce_axes: tuple
    inputs: tuple             # KernelInput
    scalars: tuple            # dtype code of each runtime scalar, in fargs order
    body: tuple               # Stmt, topologically ordered, ids == positions
    outputs: tuple            # KernelOutput
    comment: str = ""
    scalar_params: tuple = field(default=(), compare=False)  # program scalar slots
    #: the comment's parts, ``(text, nodes)`` each: the part is ``text`` and the
    #: user's lines that recorded ``nodes`` (graph nodes), so a plan kept on disk
    #: names the lines of the graph it is loaded for (:func:`lazyrt.planner.kernel_builder.comment`)
    comment_parts: tuple = field(default=(), compare=False, repr=False)

    @property
    def outer_axes(self) -> tuple:
        return tuple(a for a in range(len(self.domain)) if a not in self.reduce_axes)

    def io_bytes(self, k, itemsize=lambda code: D.DTYPES[code].itemsize) -> int:
        """The distinct bytes of input ``k`` (outputs follow the inputs) one walk
        over the domain touches: an axis it strides along counts, and so does an
        axis its gather's indices stride along."""
        io = (self.inputs + self.outputs)[k]
        moves = None  # a gather's source moves with its indices too
        for st in self.body:
            if st.op == "gather" and st.attr[0] == k:
                idx = self.inputs[self.body[st.args[0]].attr].index.strides
                moves = tuple(a or b for a, b in zip(moves or idx, idx))
        n = 1
        for size, stride, also in zip(self.domain, io.index.strides,
                                      moves or (0,) * len(self.domain)):
            if stride != 0 or also != 0:
                n *= size
        return n * itemsize(io.dtype)

    def bytes_moved(self, itemsize=lambda code: D.DTYPES[code].itemsize) -> int:
        """Minimal bytes: each input's distinct elements read once, outputs written once."""
        total = sum(self.io_bytes(k, itemsize)
                    for k in range(len(self.inputs) + len(self.outputs)))
        for o in self.outputs:  # a scan's include_initial: one more element per row
            if any(self.body[k].op == "scan" and self.body[k].attr[1]
                   for k in statements_needed(self, [o.value])):
                rows = 1
                for a in self.outer_axes:
                    rows *= self.domain[a]
                total += rows * itemsize(o.dtype)
        return total

    def describe(self) -> str:
        axes = f"scan={list(self.reduce_axes)}" if is_scan(self) else \
            f"reduce={list(self.reduce_axes)}"
        lines = [f"kernel {self.name}  domain={list(self.domain)} {axes}"]
        if self.comment:
            lines.append(f"  # {self.comment}")
        for k, i in enumerate(self.inputs):
            lines.append(f"  in{k}  = buf{i.buffer} {D.NAMES[i.dtype]} "
                         f"offset={i.index.offset} strides={i.index.strides}")
        lines += [f"  {s}" for s in self.body]
        for k, o in enumerate(self.outputs):
            lines.append(f"  out{k} = buf{o.buffer} {D.NAMES[o.dtype]} <- v{o.value} "
                         f"offset={o.index.offset} strides={o.index.strides}")
        return "\n".join(lines)


@dataclass(frozen=True)
class GatherCheck:
    """The range check a launch runs before a kernel with a ``gather``: every
    index the kernel loads (input ``index`` over the kernel's domain) must lie in
    [-size, size) when ``negative``, else [0, size)."""
    index: int                # the indices' input slot
    size: int
    negative: bool
    axis: int
    shape: tuple              # the indices' shape, for the message

    @property
    def bounds(self) -> tuple:
        return (-self.size if self.negative else 0), self.size

    @classmethod
    def of(cls, spec: "KernelSpec", st: Stmt) -> "GatherCheck":
        """The check of ``gather`` statement ``st`` of ``spec``."""
        _, _, size, negative, axis, shape = st.attr
        return cls(spec.body[st.args[0]].attr, size, negative, axis, shape)

    def message(self, bad: int) -> str:
        return index_error(CHECKED_NAMES["gather"], bad, f"axis {self.axis} of size "
                           f"{self.size} (indices of shape {self.shape})", self.size,
                           self.negative)


def gather_checks(spec: KernelSpec) -> tuple:
    """A :class:`GatherCheck` per distinct ``gather`` in ``spec``."""
    checks = []
    for st in spec.body:
        if st.op == "gather" and GatherCheck.of(spec, st) not in checks:
            checks.append(GatherCheck.of(spec, st))
    return tuple(checks)


def is_scan(spec: KernelSpec) -> bool:
    """Whether ``spec`` is a scan kernel: its reduce axis is scanned (a ``scan``
    statement), not reduced; the emitters lay it out on its own."""
    return any(st.op == "scan" for st in spec.body)


def coalesce(spec: KernelSpec) -> KernelSpec:
    """Merge adjacent domain axes that every buffer walks contiguously.

    Two neighbours merge when both are outer or both reduced, and for every
    input and output stride[a] == stride[a+1] * size[a+1]. A contiguous
    elementwise kernel over (64, 128, 32) becomes one loop of 262144.
    Size-1 axes are kept (with the planner's natural strides they merge like
    any other), so a batch of 1 yields the same loops, and the same compiled
    kernel, as a batch of 32.
    """
    domain = list(spec.domain)
    reduce = set(spec.reduce_axes)
    maps = [io.index.strides for io in spec.inputs + spec.outputs]
    keep = list(range(len(domain)))
    axes = [[a] for a in keep]
    sizes = [domain[a] for a in keep]
    strides = [[m[a] for a in keep] for m in maps]
    is_red = [a in reduce for a in keep]
    k = len(sizes) - 2
    while k >= 0:
        j = k + 1
        if is_red[k] == is_red[j] and all(s[k] == s[j] * sizes[j] for s in strides):
            sizes[k] *= sizes[j]
            for s in strides:
                s[k] = s[j]
                del s[j]
            axes[k] += axes[j]
            del sizes[j], axes[j], is_red[j]
        k -= 1
    n_in = len(spec.inputs)
    inputs = tuple(KernelInput(i.buffer, i.dtype, IndexMap(i.index.offset, tuple(strides[n])))
                   for n, i in enumerate(spec.inputs))
    outputs = tuple(KernelOutput(o.buffer, o.dtype,
                                 IndexMap(o.index.offset, tuple(strides[n_in + n])), o.value)
                    for n, o in enumerate(spec.outputs))
    new_reduce = tuple(a for a in range(len(sizes)) if is_red[a])
    return KernelSpec(spec.name, tuple(sizes), new_reduce, inputs, spec.scalars, spec.body,
                      outputs, spec.comment, spec.scalar_params, spec.comment_parts)


def statements_needed(spec: KernelSpec, targets, done=(), stop=()) -> list[int]:
    """The statements that compute ``targets``, in program order. The walk stops
    at statements in ``done`` (row values an earlier pass computed: left out),
    and at reductions of a reducing kernel and statements in ``stop`` (kept,
    but their inputs are not: the value comes from an earlier pass)."""
    reducing = bool(spec.reduce_axes)
    want, stack = set(), list(targets)
    while stack:
        sid = stack.pop()
        if sid in want or sid in done:
            continue
        st = spec.body[sid]
        want.add(sid)
        if (st.op == "reduce" and reducing) or sid in stop:
            continue
        stack.extend(st.args)
    return sorted(want)
