"""Plan steps and how they are scheduled: the step types a Plan is made of,
their buffer dependencies and order, and the merges done on whole kernels
(sibling loops sharing an input; a pointwise epilogue folded into a matmul).

These work on KernelSpecs and buffers only; building kernels from the graph
is :mod:`lazyrt.planner`'s job.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ops
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
    return [steps[k] for k in _topological(steps, _step_inputs(steps))]


def _step_inputs(steps) -> list:
    """inputs[k]: the steps that write a buffer step k reads, in read order."""
    writer = {}
    for k, s in enumerate(steps):
        for b in _writes(s):
            writer[b] = k
    return [[writer[b] for b in _reads(s) if b in writer and writer[b] != k]
            for k, s in enumerate(steps)]


def _topological(steps, inputs) -> list:
    """Step indices, each after the steps it reads: depth first from each step
    in turn. Iterative: a plan of a long chain has thousands of steps, one
    stack frame each would overflow Python's stack."""
    state = [0] * len(steps)          # 0 unvisited, 1 on the path, 2 placed
    order = []
    for root in range(len(steps)):
        if state[root]:
            continue
        state[root] = 1
        path = [(root, iter(inputs[root]))]
        while path:
            k, pending = path[-1]
            for w in pending:
                if state[w] == 0:
                    state[w] = 1
                    path.append((w, iter(inputs[w])))
                    break
                if state[w] == 1:
                    raise AssertionError("lazyrt internal: cyclic plan")
            else:
                path.pop()
                state[k] = 2
                order.append(k)
    return order


def _fuse_epilogues(steps, buffers):
    """Fold a pointwise kernel into the matmul whose product it alone reads,
    element for element (bias, activation and residual add of ``gelu(x @ w + b)``)."""
    steps = list(steps)
    readers = {}                      # buffer -> indices of the live steps reading it
    for k, st in enumerate(steps):
        for b in _reads(st):
            readers.setdefault(b, set()).add(k)
    for m, st in enumerate(steps):
        if not isinstance(st, MatmulStep) or buffers[st.out].kind != "scratch":
            continue
        shape = buffers[st.out].shape
        whole = IndexMap(0, S.contiguous_strides(shape))
        users = readers.get(st.out, ())
        if len(users) != 1:
            continue
        (r,) = users
        if not isinstance(steps[r], KernelStep):
            continue
        spec = steps[r].spec
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
        for b in _reads(steps[r]):
            readers[b].discard(r)
        steps[m] = MatmulStep(st.a, st.b, st.out, epilogue)
        steps[r] = None               # its reads are now the matmul's
        for b in _reads(steps[m]):
            readers.setdefault(b, set()).add(m)
    return [st for st in steps if st is not None]


def _closures(steps):
    """(deps, users): bit w of ``deps[k]`` is set when step k reads, directly or
    through other steps, what step w writes; ``users[w]`` is the converse.
    Bit sets as Python ints: the closure of a plan of n steps costs n * n / 64
    word operations, where sets of indices would cost n * n / 2 hashings."""
    inputs = _step_inputs(steps)
    order = _topological(steps, inputs)
    deps = [0] * len(steps)
    for k in order:                   # inputs first
        d = 0
        for w in inputs[k]:
            d |= deps[w] | (1 << w)
        deps[k] = d
    users = [0] * len(steps)
    for k in reversed(order):         # readers first
        for w in inputs[k]:
            users[w] |= users[k] | (1 << k)
    return deps, users


def _merge_siblings(steps):
    """Kernels over the same domain and reduce axes that read a common buffer
    and do not depend on each other become one loop (sum and max of x, mean
    and var, y = x + 1 and z = x * 2). Pairs merge in the order (first step,
    second step), one at a time."""
    steps = list(steps)
    while True:
        pair = _first_mergeable_pair(steps)
        if pair is None:
            return steps
        a, b = pair
        steps[a] = KernelStep(merge_kernels(steps[a].spec, steps[b].spec))
        del steps[b]


def _first_mergeable_pair(steps):
    """The first (a, b), a < b, of kernels that may merge, or None."""
    def sibling_keys(spec):
        return {(spec.domain, spec.reduce_axes, i.buffer) for i in spec.inputs}

    readers = {}                      # (domain, reduce axes, buffer) -> bit set of kernels
    for k, st in enumerate(steps):
        if isinstance(st, KernelStep):
            for key in sibling_keys(st.spec):
                readers[key] = readers.get(key, 0) | (1 << k)
    deps = users = None
    for a, st in enumerate(steps):
        if not isinstance(st, KernelStep):
            continue
        later = 0
        for key in sibling_keys(st.spec):
            later |= readers[key]
        later >>= a + 1
        if not later:
            continue
        if deps is None:              # only plans with siblings pay for the closure
            deps, users = _closures(steps)
        later &= ~((deps[a] | users[a]) >> (a + 1))
        if later:
            return a, a + (later & -later).bit_length()
    return None


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
