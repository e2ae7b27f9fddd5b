"""Plan steps and how they are scheduled: the step types a Plan is made of,
their buffer dependencies and order, and the merges done on whole kernels
(sibling loops sharing an input; a pointwise epilogue folded into a matmul).

These work on KernelSpecs and buffers only; building kernels from the graph
is :mod:`lazyrt.planner`'s job.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import ops
from . import strided as S
from .kernel_ir import IndexMap, KernelOutput, KernelSpec, Stmt

@dataclass(frozen=True)
class Buffer:
    id: int
    dtype: int
    shape: tuple
    kind: str                 # "param", "scratch" (reused across runs) or "output" (fresh)
    node: int                 # graph node it holds


@dataclass(frozen=True)
class BufferView:
    """A logical tensor read from a buffer through a strided view."""
    buffer: int
    view: S.Strided


@dataclass(frozen=True)
class KernelStep:
    spec: KernelSpec


@dataclass(frozen=True)
class MatmulStep:
    a: BufferView
    b: BufferView
    out: int
    #: pointwise kernel over the product, fused when the backend asks for it:
    #: its inputs[0] is the product itself (never materialized), at full rank
    epilogue: KernelSpec | None = None


@dataclass(frozen=True)
class OpaqueStep:
    op: ops.OpDef
    inputs: tuple             # BufferView per operand
    attrs: object
    out: int


def _order_steps(steps, buffers):
    """Topological order of steps by the buffers they write and read."""
    writer = {}
    for k, s in enumerate(steps):
        for b in _writes(s):
            writer[b] = k
    order, state = [], [0] * len(steps)

    def visit(k):
        if state[k] == 2:
            return
        if state[k] == 1:
            raise AssertionError("lazyrt internal: cyclic plan")
        state[k] = 1
        for b in _reads(steps[k]):
            if b in writer and writer[b] != k:
                visit(writer[b])
        state[k] = 2
        order.append(steps[k])

    for k in range(len(steps)):
        visit(k)
    return order


def _fuse_epilogues(steps, buffers):
    """Fold a pointwise kernel into the matmul whose product it alone reads,
    element for element (bias, activation and residual add of ``gelu(x @ w + b)``)."""
    steps = list(steps)
    for m, st in enumerate(steps):
        if not isinstance(st, MatmulStep) or buffers[st.out].kind != "scratch":
            continue
        shape = buffers[st.out].shape
        whole = IndexMap(0, S.contiguous_strides(shape))
        readers = [k for k, other in enumerate(steps) if st.out in _reads(other)]
        if len(readers) != 1 or not isinstance(steps[readers[0]], KernelStep):
            continue
        spec = steps[readers[0]].spec
        uses = [i for i in spec.inputs if i.buffer == st.out]
        if spec.reduce_axes or tuple(spec.domain) != tuple(shape) or \
                len(uses) != 1 or uses[0].index != whole:
            continue
        # the product becomes input 0 of the epilogue
        order = [spec.inputs.index(uses[0])] + [k for k, i in enumerate(spec.inputs)
                                                  if i is not uses[0]]
        slot = {old: new for new, old in enumerate(order)}
        body = tuple(Stmt(b.id, b.op, b.dtype, b.args, slot[b.attr]) if b.op == "load" else b
                     for b in spec.body)
        epilogue = KernelSpec(spec.name.replace("_fused_", "_matmul_", 1), spec.domain, (),
                              tuple(spec.inputs[k] for k in order), spec.scalars, body,
                              spec.outputs, "matmul, then " + spec.comment, spec.scalar_params)
        steps[m] = MatmulStep(st.a, st.b, st.out, epilogue)
        steps[readers[0]] = None
    return [st for st in steps if st is not None]


def _depends(steps):
    """deps[k]: indices of the steps that step k reads from, transitively."""
    writer = {b: k for k, st in enumerate(steps) for b in _writes(st)}
    deps = [None] * len(steps)

    def visit(k):
        if deps[k] is None:
            deps[k] = set()
            for b in _reads(steps[k]):
                w = writer.get(b)
                if w is not None and w != k:
                    deps[k] |= {w} | visit(w)
        return deps[k]

    for k in range(len(steps)):
        visit(k)
    return deps


def _merge_siblings(steps):
    """Kernels over the same domain and reduce axes that read a common buffer
    and do not depend on each other become one loop (sum and max of x, mean
    and var, y = x + 1 and z = x * 2)."""
    steps = list(steps)
    merged = True
    while merged:
        merged = False
        deps = _depends(steps)
        for a in range(len(steps)):
            sa = steps[a]
            if not isinstance(sa, KernelStep):
                continue
            for b in range(a + 1, len(steps)):
                sb = steps[b]
                if not isinstance(sb, KernelStep):
                    continue
                ka, kb = sa.spec, sb.spec
                if (ka.domain, ka.reduce_axes) != (kb.domain, kb.reduce_axes):
                    continue
                if not {i.buffer for i in ka.inputs} & {i.buffer for i in kb.inputs}:
                    continue
                if a in deps[b] or b in deps[a]:
                    continue
                steps[a] = KernelStep(merge_kernels(ka, kb))
                del steps[b]
                merged = True
                break
            if merged:
                break
    return steps


def merge_kernels(a: KernelSpec, b: KernelSpec) -> KernelSpec:
    """One kernel computing both: inputs, scalars and equal statements shared."""
    inputs, slot = list(a.inputs), {(i.buffer, i.index): k for k, i in enumerate(a.inputs)}
    scalars, sparams = list(a.scalars), list(a.scalar_params)
    sslot = {p: k for k, p in enumerate(sparams)}
    body = list(a.body)
    seen = {(s.op, s.dtype, s.args, repr(s.attr), s.acc): s.id for s in body}
    remap = {}
    for s in b.body:
        attr = s.attr
        if s.op == "load":
            inp = b.inputs[attr]
            key = (inp.buffer, inp.index)
            if key not in slot:
                slot[key] = len(inputs)
                inputs.append(inp)
            attr = slot[key]
        elif s.op == "scalar":
            p = b.scalar_params[attr]
            if p not in sslot:
                sslot[p] = len(sparams)
                sparams.append(p)
                scalars.append(b.scalars[attr])
            attr = sslot[p]
        args = tuple(remap[x] for x in s.args)
        key = (s.op, s.dtype, args, repr(attr), s.acc)
        if key not in seen:
            seen[key] = len(body)
            body.append(Stmt(len(body), s.op, s.dtype, args, attr, s.acc))
        remap[s.id] = seen[key]
    outputs = a.outputs + tuple(KernelOutput(o.buffer, o.dtype, o.index, remap[o.value])
                                for o in b.outputs)
    label = b.name.split("_fused_", 1)[-1]
    return KernelSpec(f"{a.name}_{label}", a.domain, a.reduce_axes, tuple(inputs),
                      tuple(scalars), tuple(body), outputs, f"{a.comment}; {b.comment}",
                      tuple(sparams))


def _writes(step):
    if isinstance(step, KernelStep):
        return [o.buffer for o in step.spec.outputs]
    if isinstance(step, MatmulStep) and step.epilogue is not None:
        return [step.out] + [o.buffer for o in step.epilogue.outputs]
    return [step.out]


def _reads(step):
    if isinstance(step, KernelStep):
        return [i.buffer for i in step.spec.inputs]
    if isinstance(step, MatmulStep):
        extra = [i.buffer for i in step.epilogue.inputs[1:]] if step.epilogue else []
        return [step.a.buffer, step.b.buffer] + extra
    return [v.buffer for v in step.inputs]
