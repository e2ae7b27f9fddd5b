"""The emitter skeleton: how a KernelSpec's statements fall into loops.

The C and Triton emitters lay out a kernel from one :class:`KernelLayout`,
computed from the spec by :func:`kernel_layout`: which statements vary along
the reduce axes, which pass over the row computes each reduction (softmax:
max, then the sum of exp, then the store), which outputs are stored once per
row and which per element, and how each runtime scalar is read from the
scalar table. Deciding this once keeps the emitters from laying out one spec
two ways (their rules for element outputs once disagreed on size-1 axes).

>>> from lazyrt import dtypes as D
>>> from lazyrt.planner.kernel_ir import IndexMap, KernelInput, KernelOutput, KernelSpec, Stmt
>>> row = KernelInput(0, D.FLOAT32, IndexMap(0, (4, 1)))
>>> body = (Stmt(0, "load", D.FLOAT32, (), 0), Stmt(1, "reduce", D.FLOAT32, (0,), "max"))
>>> spec = KernelSpec("k0", (8, 4), (1,), (row,), (), body,
...                   (KernelOutput(1, D.FLOAT32, IndexMap(0, (1, 0)), 1),))
>>> lay = kernel_layout(spec)
>>> lay.elem, lay.row_outputs, lay.elem_outputs, [[st.id for st in p] for p in lay.passes]
((True, False), (0,), (), [[1]])
"""
from __future__ import annotations

from dataclasses import dataclass

from lazyrt import dtypes as D
from lazyrt import ops
from lazyrt.lowering import EmitError
from lazyrt.planner.kernel_ir import COMPUTED_IN, KernelSpec, is_scan, statements_needed
from lazyrt.planner.passes import computes_wider


@dataclass(frozen=True)
class ScalarRead:
    """Runtime scalar ``k`` of a kernel (``s{k}`` in the source), the word
    ``slot`` of the program's scalar table (the C launcher gathers a kernel's
    words into its own table, where it is word ``k``).

    The table holds 64-bit words: doubles, or an integer's exact int64 bits
    (``int_bits``: a double would round past 2**53, and the bits read as a
    double turn 5 into 0). A bool is its word ``!= 0``; any other scalar is
    its word converted to ``dtype``.
    """
    k: int
    slot: int
    dtype: int

    @property
    def int_bits(self) -> bool:
        return self.dtype in D.INTEGRAL


@dataclass(frozen=True)
class KernelLayout:
    """What every emitter lays out a kernel from (see :func:`kernel_layout`)."""
    elem: tuple          # per statement: varies along the reduce axes (else one value per row)
    stage: tuple         # per statement: how many passes over the row finish before it runs
    passes: tuple        # per pass over the row, in order: the reduce statements it accumulates
    row_outputs: tuple   # numbers of the outputs stored once per row (outer point)
    elem_outputs: tuple  # numbers of the outputs stored at every element of the row
    scalars: tuple       # ScalarRead per runtime scalar
    invariant: tuple = ()  # statements (ids, in order) worth computing once, before the loops


def kernel_layout(spec: KernelSpec) -> KernelLayout:
    """The layout of ``spec``.

    A statement is element-level when it varies along the reduce axes; a
    reduction is in the pass after the last pass its argument needs. An
    output is stored per element when its value or its address varies along
    the reduce axes: any stride on a reduce axis counts, whatever the axis's
    size, since the source bakes strides and never sizes (a row of 1 gets the
    layout, and the compiled kernel, of a row of 5).
    """
    _check_rounded(spec)
    red = spec.reduce_axes
    elem = varies_along(spec, red)
    stage = [0] * len(spec.body)
    for st in spec.body:
        if st.op in ("load", "gather", "scalar", "const"):
            pass
        elif st.op == "reduce" and red:
            stage[st.id] = stage[st.args[0]] + 1
        else:
            stage[st.id] = max((stage[a] for a in st.args), default=0)
    reduces = [st for st in spec.body if st.op == "reduce" and red]
    count = max((stage[st.id] for st in reduces), default=0)
    passes = tuple(tuple(st for st in reduces if stage[st.id] == p) for p in range(1, count + 1))
    per_elem = [elem[o.value] or any(o.index.strides[a] != 0 for a in red)
                for o in spec.outputs]
    return KernelLayout(tuple(elem), tuple(stage), passes,
                        tuple(k for k, e in enumerate(per_elem) if not e),
                        tuple(k for k, e in enumerate(per_elem) if e),
                        scalar_reads(spec), loop_invariant(spec))


def walks_reading(spec: KernelSpec) -> dict:
    """Input number -> how many walks over a row read it, where more than one:
    each pass of a reducing kernel reads what its reductions need, and the walk
    storing element outputs reads what they need (a LayerNorm's input: the
    mean's pass, the variance's, the normalized store). The first walk brings
    the row in; the others re-read it (from cache while the row fits)."""
    if not spec.reduce_axes or is_scan(spec):
        return {}
    lay = kernel_layout(spec)
    walks = [statements_needed(spec, [st.args[0] for st in p]) for p in lay.passes]
    if lay.elem_outputs:
        walks.append(statements_needed(spec, [spec.outputs[k].value for k in lay.elem_outputs]))
    counts = {}
    for sids in walks:
        for k in {spec.body[x].attr if spec.body[x].op == "load" else spec.body[x].attr[0]
                  for x in sids if spec.body[x].op in ("load", "gather") and lay.elem[x]}:
            counts[k] = counts.get(k, 0) + 1
    return {k: n for k, n in counts.items() if n > 1}


def reread_bytes(spec: KernelSpec) -> int:
    """Bytes the walks after the first read again (see :func:`walks_reading`), on
    top of :meth:`~lazyrt.planner.kernel_ir.KernelSpec.bytes_moved`."""
    return sum((n - 1) * spec.io_bytes(k) for k, n in walks_reading(spec).items())


def varies_along(spec: KernelSpec, axes) -> list:
    """Per statement of ``spec``: whether its value varies along any of ``axes``
    (a load or gather whose address strides along one, or an op of such a value;
    a gather also varies with its loaded index). A reduction's result is one
    value per row (a ``reduce`` over no axes, in a kernel without reduce axes,
    is its argument)."""
    varies = [False] * len(spec.body)
    for st in spec.body:
        if st.op in ("load", "gather"):
            strides = spec.inputs[st.attr if st.op == "load" else st.attr[0]].index.strides
            varies[st.id] = any(strides[a] != 0 for a in axes) or any(varies[a] for a in st.args)
        elif st.op not in ("scalar", "const") and not (st.op == "reduce" and spec.reduce_axes):
            varies[st.id] = any(varies[a] for a in st.args)
    return varies


def loop_invariant(spec: KernelSpec) -> tuple:
    """The statements of ``spec`` that are one value for the whole kernel (runtime
    scalars, constants, a 0-d input, and pointwise ops of those only; a bare
    scalar, constant or load only where a hoisted op reads it): an emitter
    computes them once, before the loops. An optimizer step on a tensor step count computes its bias
    corrections (two ``pow``s, a ``sqrt``, divisions) there, not at every element:
    the C compiler does not hoist them itself (2 ``powf`` per element made Adam's
    kernel 30x slower than its memory traffic)."""
    invariant = [False] * len(spec.body)
    out = []
    for st in spec.body:
        if st.op in ("scalar", "const"):
            invariant[st.id] = True
        elif st.op == "load":
            invariant[st.id] = not any(spec.inputs[st.attr].index.strides)
        elif st.op in ("gather", "reduce") or not st.args:
            continue
        else:
            invariant[st.id] = all(invariant[a] for a in st.args)
        if invariant[st.id]:
            out.append(st.id)
    # a scalar, constant or load alone is not worth hoisting: only what an op hoisted reads
    trivial = ("scalar", "const", "load")
    used = {a for sid in out if spec.body[sid].op not in trivial for a in spec.body[sid].args}
    return tuple(sid for sid in out if spec.body[sid].op not in trivial or sid in used)


def scalar_reads(spec: KernelSpec) -> tuple:
    """How to read each of ``spec``'s runtime scalars (a :class:`ScalarRead` each)."""
    params = spec.scalar_params  # empty in a spec built by hand: slot k is scalar k
    return tuple(ScalarRead(k, params[k] if k < len(params) else k, code)
                 for k, code in enumerate(spec.scalars))


def _check_rounded(spec: KernelSpec):
    """Emitters never round float16 on their own: an op still computing a
    float16 result means the planner's passes did not run on ``spec``."""
    for st in spec.body:
        if computes_wider(st):
            raise EmitError(f"kernel {spec.name}: v{st.id} = {st.op} computes "
                            f"{D.NAMES[st.dtype]} directly; run lazyrt.planner.passes.run "
                            f"on the spec (it computes in {D.NAMES[COMPUTED_IN[st.dtype]]} "
                            f"and rounds with a cast)")


def fold_op(st) -> ops.OpDef:
    """The op table's entry of a ``reduce`` or ``scan`` statement: a reduce
    statement names its reduction (``attr``), a scan's ``attr[0]`` is its op. The
    emitters lay the fold out by its ``combine`` and start it at its ``identity``."""
    if st.op == "scan":
        return st.attr[0]
    op = ops.REDUCTIONS.get(st.attr)
    if op is None:
        raise EmitError(f"no reduction {st.attr!r} in the op table")
    return op


def combine_of(st) -> ops.Combine:
    """How a ``reduce`` or ``scan`` statement folds (:func:`fold_op`)."""
    return fold_op(st).combine


def scan_initial_outputs(spec) -> list:
    """(k, output, identity) for each output of ``spec`` that stores a scan's value
    under include_initial: it gets the op table's identity at element -1 first."""
    out = []
    for k, o in enumerate(spec.outputs):
        for sid in statements_needed(spec, [o.value]):
            st = spec.body[sid]
            if st.op == "scan" and st.attr[1]:
                out.append((k, o, fold_op(st).identity(spec.body[st.args[0]].dtype)))
                break
    return out
