"""Building one kernel: a fusion group of the graph -> its :class:`KernelSpec`.

The planner (``fusion.py``) decides which nodes a kernel computes; a
:class:`KernelBuilder` walks them from the kernel's root, folds views into
index maps, lays out reductions over a row domain (and a scan along its
axis), and writes the spec's SSA body, loads and stores. It is where
legality lives: a fusion the builder cannot express raises :class:`Replan`
naming the node to store and why, and the planner stores it and tries again.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ops
from . import passes
from . import strided as S
from .kernel_ir import IndexMap, KernelInput, KernelOutput, KernelSpec, Stmt


class Replan(Exception):
    """An illegal fusion: ``node`` must be stored, for ``reason``."""
    def __init__(self, node, reason):
        super().__init__(reason)
        self.node, self.reason = node, reason


def _user_lines(nodes, ids, shown=3) -> str:
    """`` (at train.py:12, train.py:14)``: the user's lines that recorded the
    ops of ``ids``, for the kernel's header comment ('' when unknown)."""
    lines, seen = [], set()
    for i in ids:
        n = nodes[i]
        if n.op.kind in (ops.POINTWISE, ops.REDUCTION, ops.SCAN) and n.origin not in seen:
            seen.add(n.origin)
            where = n.source
            if where:
                where = where.rsplit("/", 1)[-1].replace("*/", "* /")  # a C comment stays one
                if where not in lines:
                    lines.append(where)
    if not lines:
        return ""
    more = f", +{len(lines) - shown} more" if len(lines) > shown else ""
    return f" (at {', '.join(lines[:shown])}{more})"


@dataclass(frozen=True)
class BuiltKernel:
    """A kernel as :class:`KernelBuilder` built it, with every question it asked
    of the plan: whether a node is stored (``stored``), where a view chain
    starts (``bases``), whether a node has a buffer (``buffered``). Where each
    gets the same answer, a build again would give the same kernel: the
    planner reuses it across attempts."""
    spec: KernelSpec
    side_outputs: frozenset   # outputs computed inside it and stored by it
    computed: frozenset       # the nodes it computes
    stored: dict
    bases: dict
    buffered: dict

    def holds(self, planner, buf_of) -> bool:
        """Whether every question gets the same answer from ``planner`` now."""
        return (all(planner.is_buffer_node(j) == a for j, a in self.stored.items())
                and all(planner.view_base(j) == a for j, a in self.bases.items())
                and all((j in buf_of) == a for j, a in self.buffered.items()))


def comment(parts, nodes) -> str:
    """A kernel's header comment from its ``comment_parts`` (see
    :class:`~lazyrt.planner.kernel_ir.KernelSpec`), naming the user's lines of
    ``nodes`` (a graph's)."""
    return "; ".join(text + _user_lines(nodes, ids) for text, ids in parts)


class KernelBuilder:
    """Builds one KernelSpec rooted at a realized node (legality lives here)."""

    def __init__(self, planner, root, buf_of, scalar_of, number):
        self.p, self.root, self.buf_of, self.scalar_of = planner, root, buf_of, scalar_of
        self.stored, self.bases, self.buffered = {}, {}, {}  # questions asked (BuiltKernel)
        self.nodes = planner.nodes
        self.number = number
        rn = self.nodes[root]
        self.root_chain = ()
        if rn.op.kind == ops.REDUCTION:
            self.domain = self.nodes[rn.inputs[0]].shape
            self.reduce_axes = tuple(rn.attrs[0])
        elif rn.op.kind == ops.SCAN:  # over its input, the scan axis as the row
            self.domain = self.nodes[rn.inputs[0]].shape
            self.reduce_axes = (rn.attrs[0],)
        else:
            self.domain = rn.shape
            self.reduce_axes = None
            self.adopt_row_domain(rn)
        self.body, self.memo, self.reduce_memo = [], {}, {}
        self.inputs, self.input_slot = [], {}
        self.scalars, self.scalar_params, self.scalar_index = [], [], {}
        self.outputs, self.side_outputs = [], set()
        self.fused_ops = []

    def adopt_row_domain(self, rn):
        """A pointwise root shaped like a reduction's result it consumes (``mean``
        is ``sum / n``) runs over the reduction's domain and is stored per row."""
        stack, seen = list(rn.inputs), set()
        while stack:
            j = stack.pop()
            if j in seen or self.is_buffer_node(j):
                continue
            seen.add(j)
            n = self.nodes[j]
            if n.op.kind == ops.REDUCTION:
                axes, keepdims = tuple(n.attrs[0]), n.attrs[1]
                src_shape = self.nodes[n.inputs[0]].shape
                if n.shape == rn.shape and src_shape != rn.shape:
                    keep = tuple(1 if a in axes else d for a, d in enumerate(src_shape))
                    chain = (("expand", (src_shape,), None),)
                    if not keepdims:
                        chain = (("reshape", (keep,), None),) + chain
                    self.domain, self.reduce_axes, self.root_chain = src_shape, axes, chain
                    return
            elif n.op.kind in (ops.POINTWISE, ops.VIEW):
                stack.extend(n.inputs)

    def is_buffer_node(self, i) -> bool:
        got = self.stored.get(i)
        if got is None:
            got = self.stored[i] = self.p.is_buffer_node(i)
        return got

    def view_base(self, i):
        got = self.bases.get(i)
        if got is None:
            got = self.bases[i] = self.p.view_base(i)
        return got

    def has_buffer(self, i) -> bool:
        got = self.buffered.get(i)
        if got is None:
            got = self.buffered[i] = i in self.buf_of
        return got

    def built(self) -> BuiltKernel:
        """The kernel :meth:`build` built, with the questions it asked."""
        spec = self.build()
        return BuiltKernel(spec, frozenset(self.side_outputs), frozenset(self.computed),
                           self.stored, self.bases, self.buffered)

    def stmt(self, op, dtype, args=(), attr=None, acc=None):
        s = Stmt(len(self.body), op, dtype, tuple(args), attr, acc)
        self.body.append(s)
        return s.id

    def build(self) -> KernelSpec:
        rn = self.nodes[self.root]
        if rn.op.kind == ops.REDUCTION:
            v = self.reduction(self.root, None)
            keep = tuple(1 if a in self.reduce_axes else d for a, d in enumerate(self.domain))
            st = S.contiguous_strides(keep)
            imap = IndexMap(0, tuple(0 if a in self.reduce_axes else s for a, s in enumerate(st)))
        elif rn.op.kind == ops.SCAN:
            v, imap = self.scan(self.root)
        else:
            v = self.value(self.root, self.root_chain)
            view = self.view_of(self.root, self.root_chain)
            strides = self.row_strides(view.strides) if self.root_chain else view.strides
            imap = IndexMap(view.offset, strides)
        self.outputs.insert(0, KernelOutput(self.buf_of[self.root], rn.dtype, imap, v))
        names = []
        for name in self.fused_ops:
            if name not in names:
                names.append(name)
        label = "_".join(names[:4]) or "copy"
        fused = {self.root} | {i for i, _ in self.memo if not self.is_buffer_node(i)}
        self.computed = fused
        parts = ((f"fuses {', '.join(self.fused_ops) or 'a copy'}", tuple(sorted(fused))),)
        spec = KernelSpec(f"k{self.number}_fused_{label}", tuple(self.domain),
                          tuple(self.reduce_axes or ()), tuple(self.inputs),
                          tuple(self.scalars), tuple(self.body), tuple(self.outputs),
                          comment(parts, self.nodes), tuple(self.scalar_params), parts)
        return passes.run(spec)

    # -- values --
    def value(self, i, chain) -> int:
        """SSA id of node i evaluated at the domain point, seen through ``chain``.

        ``chain`` lists (op name, attrs, node) view steps mapping node i's
        shape onto the domain; it is applied to a buffer's strides at loads.
        """
        key = (i, chain)
        if key in self.memo:
            return self.memo[key]
        n = self.nodes[i]
        if self.is_buffer_node(i) and i != self.root:
            v = self.load(i, chain)
            self.memo[key] = v
            return v  # read from its buffer: whoever computes it stores it
        if n.op is ops.SCALAR:
            if i not in self.scalar_index:
                self.scalar_index[i] = len(self.scalars)
                self.scalars.append(n.dtype)
                self.scalar_params.append(self.scalar_of[i])
            v = self.stmt("scalar", n.dtype, attr=self.scalar_index[i])
        elif n.op is ops.CONST:
            v = self.stmt("const", n.dtype, attr=n.value)
        elif n.op.kind == ops.VIEW:
            v = self.value(n.inputs[0], ((n.op.name, n.attrs, i),) + chain)
        elif n.op.kind == ops.POINTWISE:
            args = []
            for j in n.inputs:
                sub = chain
                if self.nodes[j].shape != n.shape:
                    sub = (("expand", (n.shape,), None),) + chain
                args.append(self.value(j, sub))
            self.fused_ops.append(n.op.name)
            attr = n.attrs[0] if n.op is ops.CAST else None
            v = self.stmt(n.op, n.dtype, args, attr)
        elif n.op.kind == ops.REDUCTION:
            v = self.reduction(i, chain)
        elif n.op is ops.GATHER and self.p.caps.gather_in_kernels:
            v = self.gather(i, chain)
        else:
            raise AssertionError(f"lazyrt internal: {n.op.name} reached a kernel body")
        self.memo[key] = v
        if i in self.p.outputs and i != self.root:
            self.maybe_store(i, chain, v)
        return v

    def view_of(self, i, chain, start=None) -> S.Strided:
        """Node i's layout (``start``, else its buffer's) seen through ``chain``.
        Without ``start`` it depends on the graph alone: the planner keeps it
        for every kernel (kernels that recompute a value load the same views)."""
        if start is None:
            key = (i, chain)
            got = self.p.views.get(key)
            if got is None:
                got = self.p.views[key] = self._view_of(i, chain, self.p.layout(i))
        else:
            got = self._view_of(i, chain, start)
        if isinstance(got, S.Strided):
            return got
        raise Replan(got, "reshape of a non-contiguous view needs a copy")

    def _view_of(self, i, chain, v):
        """``v`` through ``chain``, or the node to store when a reshape cannot view it."""
        for name, attrs, node in chain:
            w = S.apply_view(v, name, attrs)
            if w is None:
                return self.nodes[node].inputs[0] if node is not None else i
            v = w
        return v

    def load(self, i, chain) -> int:
        v = self.view_of(i, chain)
        imap = IndexMap(v.offset, v.strides)
        key = (self.buf_of[i], imap)
        if key not in self.input_slot:
            self.input_slot[key] = len(self.inputs)
            self.inputs.append(KernelInput(self.buf_of[i], self.nodes[i].dtype, imap))
        return self.stmt("load", self.nodes[i].dtype, attr=self.input_slot[key])

    def gather(self, i, chain) -> int:
        """A gather computed inside this kernel: its indices are loaded as any
        operand is, and its source is read at them. The source's read is an input
        whose index map leaves the gathered axis out (stride 0 there); the
        ``gather`` statement adds the loaded index times that axis's stride:
        ``attr = (input slot, axis stride, axis size, negative, axis, indices'
        shape)``. Its argument is the indices' load, which the launch range-checks
        (:func:`lazyrt.planner.kernel_ir.gather_checks`)."""
        n = self.nodes[i]
        if self.nodes[self.root].op.kind == ops.SCAN:
            raise Replan(i, "a scan kernel fuses only pointwise producers: the gather it "
                            "reads is stored")
        src, idx = n.inputs
        axis, negative = n.attrs
        sub = chain if self.nodes[idx].shape == n.shape else \
            (("expand", (n.shape,), None),) + chain
        index = self.value(idx, sub)
        if self.body[index].op != "load":
            raise AssertionError("lazyrt internal: a fused gather's indices are not a load")
        base, bchain = self.view_base(src)
        source = self.p.strided_through(base, bchain)
        at = self.view_of(i, chain, S.Strided(tuple(n.shape), tuple(
            0 if a == axis else st for a, st in enumerate(source.strides)), source.offset))
        imap = IndexMap(at.offset, at.strides)
        key = (self.buf_of[base], imap)
        if key not in self.input_slot:
            self.input_slot[key] = len(self.inputs)
            self.inputs.append(KernelInput(self.buf_of[base], n.dtype, imap))
        self.fused_ops.append(n.op.name)
        attr = (self.input_slot[key], source.strides[axis], source.shape[axis], bool(negative),
                axis, tuple(self.nodes[idx].shape))
        return self.stmt("gather", n.dtype, (index,), attr)

    def scan(self, i):
        """The root scan: its argument (pointwise producers fused) accumulated
        along the axis in the op table's accumulator, then cast to the result
        dtype. Returns the stored value and its index map: the result's own
        contiguous layout, one element later along the axis under
        include_initial (the emitters store the identity at element -1)."""
        n = self.nodes[i]
        axis, include_initial = n.attrs
        arg = self.value(n.inputs[0], ())
        self.fused_ops.append(n.op.name)
        acc = n.op.accumulator(self.body[arg].dtype)  # the op table's policy
        v = self.stmt("scan", acc, (arg,), (n.op, bool(include_initial)), acc)
        if n.dtype != acc:
            v = self.stmt(ops.CAST, n.dtype, (v,), n.dtype)
        strides = S.contiguous_strides(n.shape)
        return v, IndexMap(strides[axis] if include_initial else 0, strides)

    def reduction(self, i, chain) -> int:
        """A reduction computed inside this kernel: legal when its input spans
        the domain and its result is only broadcast back over the reduced axes."""
        n = self.nodes[i]
        axes = tuple(n.attrs[0])
        src = n.inputs[0]
        if self.nodes[self.root].op.kind == ops.SCAN:
            raise Replan(i, "a scan kernel fuses only pointwise producers: the reduction "
                            "it reads is stored")
        if i != self.root:
            why = self.fusable_reduction(i, chain, axes)
            if why:
                raise Replan(i, why)
        if self.reduce_axes is None:
            self.reduce_axes = axes
        key = (src, n.op.name, axes)
        if key not in self.reduce_memo:
            arg = self.value(src, ())
            self.fused_ops.append(n.op.name)
            acc = n.op.accumulator(self.body[arg].dtype)  # the op table's policy
            self.reduce_memo[key] = self.stmt("reduce", n.dtype, (arg,), n.op.name, acc)
        return self.reduce_memo[key]

    def fusable_reduction(self, i, chain, axes) -> str:
        n = self.nodes[i]
        src_shape = self.nodes[n.inputs[0]].shape
        if src_shape != tuple(self.domain):
            return (f"reduction input {list(src_shape)} differs from the kernel domain "
                    f"{list(self.domain)}")
        if self.reduce_axes is not None and self.reduce_axes != axes:
            return (f"reduces axes {axes} in a kernel that reduces {self.reduce_axes}")
        try:
            got = self.view_of(i, chain)
        except Replan:
            return "its result reaches the consumer through a reshape that needs a copy"
        keep = tuple(1 if a in axes else d for a, d in enumerate(self.domain))
        want = tuple(0 if a in axes else s for a, s in enumerate(S.contiguous_strides(keep)))
        if got.offset != 0 or tuple(
                s if d != 1 else 0 for s, d in zip(got.strides, self.domain)) != tuple(
                s if d != 1 else 0 for s, d in zip(want, self.domain)):
            return "its result is consumed in a different layout than a broadcast over its axes"
        return ""

    def maybe_store(self, i, chain, v):
        """Store an output computed inside this kernel when each element is
        visited exactly once (else its own kernel computes it)."""
        n = self.nodes[i]
        if i in self.side_outputs or not self.has_buffer(i):
            return
        try:
            view = self.view_of(i, chain)
        except Replan:
            return
        if n.op.kind == ops.REDUCTION:
            ok = True  # fusable_reduction checked it is a pure broadcast over the axes
        else:
            size = 1
            for d in self.domain:
                size *= d
            out_size = 1
            for d in n.shape:
                out_size *= d
            ok = size == out_size and all(
                s != 0 or d == 1 for s, d in zip(view.strides, self.domain))
            if ok and self.nodes[self.root].op.kind == ops.REDUCTION:
                ok = False  # a reduction kernel has no final elementwise pass to store in
        if ok:
            strides = self.row_strides(view.strides) if n.op.kind == ops.REDUCTION \
                else view.strides
            self.side_outputs.add(i)
            self.outputs.append(KernelOutput(self.buf_of[i], n.dtype,
                                             IndexMap(view.offset, strides), v))

    def row_strides(self, strides) -> tuple:
        """A per-row value's store never moves along the reduced axes (their size
        may be 0 or 1, where any stride would do: make it 0, so it reads as a
        row store and is written even when the row is empty)."""
        red = self.reduce_axes or ()
        return tuple(0 if a in red else st for a, st in enumerate(strides))
