"""The plan and its steps: the step types a Plan is made of, their buffer
dependencies and order, the merges done on whole kernels (sibling loops
sharing an input; a pointwise epilogue folded into a matmul) and the record
of every fusion refused (:class:`Refusal`).

These work on KernelSpecs and buffers only; building kernels from the graph
is :mod:`lazyrt.planner.fusion`'s job.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from . import strided as S
from .kernel_ir import IndexMap, KernelOutput, KernelSpec, Stmt, is_scan

#: kinds of :class:`Refusal`
LEGALITY = "legality"     # a kernel or a step cannot express the fusion
RECOMPUTE = "recompute"   # the policy stores a shared producer rather than recompute it
DEPTH = "depth"           # the policy's longest fused chain was reached
SIBLING = "sibling"       # kernels reading a common buffer run as separate loops
EPILOGUE = "epilogue"     # a matmul's consumer runs outside the matmul


@dataclass(frozen=True)
class Capabilities:
    """What a backend's steps can do, which bounds what the planner may fuse.

    >>> Capabilities(matmul_epilogue=True, matmul_engine="a Triton matmul kernel")
    Capabilities(matmul_epilogue=True, matmul_engine='a Triton matmul kernel')
    """
    #: its matmul step runs a pointwise kernel over the product in registers
    matmul_epilogue: bool = False
    #: what runs a matmul step, as the plan's reasons name it
    matmul_engine: str = "BLAS"
    #: its matmul step can store the product transposed (``MatmulStep.transposed``):
    #: a product only ever read transposed (a weight's gradient, ``(x^T g)^T``) is
    #: then stored in its readers' layout, and they read it contiguously
    matmul_transposed_out: bool = False
    #: its kernels read a gather's source at indices they load (a ``gather``
    #: statement): a gather fuses into the kernels that use it, instead of
    #: running as an opaque step of its own
    gather_in_kernels: bool = False


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
    #: pointwise kernel over the product, fused when the backend's matmul has an
    #: epilogue: its inputs[0] is the product itself (never materialized), at full rank
    epilogue: KernelSpec | None = None
    #: ``out`` holds the product with its last two axes swapped (``(b @ a)^T``
    #: shapes): the backend computes ``b^T @ a^T`` into it (see :func:`matmul_operands`)
    transposed: bool = False


def matmul_operands(step: MatmulStep) -> tuple:
    """(a, b) BufferViews whose product is what ``step.out`` holds: the step's
    own operands, or for a transposed step ``b^T`` and ``a^T`` (``(a @ b)^T``)."""
    if not step.transposed:
        return step.a, step.b
    return tuple(BufferView(v.buffer, S.transposed(v.view)) for v in (step.b, step.a))


@dataclass(frozen=True)
class OpaqueStep:
    """Data movement no kernel does: ``kind`` is ``"concat"`` (``attrs[0]`` the
    axis) or ``"setslice"``; backends run it on the host."""
    kind: str
    inputs: tuple             # BufferView per operand
    attrs: object
    out: int


@dataclass(frozen=True)
class Refusal:
    """Two parts of a plan that could have fused and did not, and why.

    ``nodes`` are graph nodes and ``steps`` indices into ``Plan.steps``; for a
    stored value (LEGALITY, RECOMPUTE, DEPTH) the producer comes first, then
    what reads it; for an EPILOGUE the matmul, then the kernels reading its
    product; for a SIBLING the two kernels.
    """
    kind: str                 # LEGALITY, RECOMPUTE, DEPTH, SIBLING or EPILOGUE
    nodes: tuple
    steps: tuple
    reason: str


@dataclass(frozen=True)
class Plan:
    buffers: tuple            # Buffer
    steps: tuple              # KernelStep | MatmulStep | OpaqueStep
    param_buffers: tuple      # per graph param: buffer id, or -1 for a runtime scalar
    scalar_slot: tuple        # per graph param: scalar slot, or -1 for data
    n_scalars: int
    outputs: tuple            # BufferView per graph output
    unfused: tuple = ()       # (node, reason) for every value that got a buffer
    refusals: tuple = ()      # Refusal for every fusion not taken
    graph: object = field(default=None, compare=False)
    capabilities: Capabilities = Capabilities()

    @property
    def kernels(self) -> list:
        return [s.spec for s in self.steps if isinstance(s, KernelStep)]

    def describe(self) -> str:
        lines = [f"plan: {len(self.steps)} steps, {len(self.buffers)} buffers"]
        for node, reason in self.unfused:
            lines.append(f"  buffer for {self._node_name(node)}: {reason}")
        for k, step in enumerate(self.steps):
            if isinstance(step, KernelStep):
                lines.append(f"step {k}: " + step.spec.describe().replace("\n", "\n  "))
            elif isinstance(step, MatmulStep):
                lines.append(f"step {k}: matmul buf{step.a.buffer} @ buf{step.b.buffer} "
                             f"-> buf{step.out}" + (" transposed" if step.transposed else "")
                             + f" ({self.capabilities.matmul_engine})"
                             + (" with epilogue:" if step.epilogue is not None else ""))
                if step.epilogue is not None:
                    lines.append("  " + step.epilogue.describe().replace("\n", "\n  "))
            else:
                lines.append(f"step {k}: {step.kind} -> buf{step.out} (on the host)")
        if self.refusals:
            lines.append("refused:")
        for r in self.refusals:
            join = " and " if r.kind == SIBLING else " -> "
            nodes = join.join(", ".join(self._node_name(i) for i in part)
                              for part in (r.nodes[:1], r.nodes[1:]) if part)
            steps = join.join(", ".join(f"step {k} {step_name(self.steps[k])}" for k in part)
                              for part in (r.steps[:1], r.steps[1:]) if part)
            lines.append(f"  {r.kind}: {nodes} ({steps}): {r.reason}")
        return "\n".join(lines)

    def _node_name(self, i) -> str:
        return f"%{i} ({self.graph.nodes[i].op.name})" if self.graph is not None else f"%{i}"


def step_name(step) -> str:
    """The name a step goes by in the plan: its kernel's, ``matmul`` or its kind."""
    if isinstance(step, KernelStep):
        return step.spec.name
    if isinstance(step, MatmulStep):
        return step.epilogue.name if step.epilogue is not None else "matmul"
    return step.kind


def order_steps(steps) -> list:
    """Indices of ``steps`` in topological order, by the buffers they write and read."""
    return _topological(steps, _step_inputs(steps))


def _step_inputs(steps) -> list:
    """inputs[k]: the steps that write a buffer step k reads, in read order."""
    writer = {}
    for k, s in enumerate(steps):
        for b in writes(s) if s is not None else ():
            writer[b] = k
    return [[writer[b] for b in reads(s) if b in writer and writer[b] != k]
            if s is not None else [] for k, s in enumerate(steps)]


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


def fold_epilogues(steps, buffers, capabilities, policy):
    """Fold a pointwise kernel into the matmul whose product it alone reads,
    element for element (bias, activation and residual add of ``gelu(x @ w + b)``),
    where the backend's matmul has an epilogue and ``policy.fold_epilogue``
    agrees. Returns the steps and, for each matmul whose product a kernel
    reads from memory, ``(EPILOGUE, (matmul, readers...), reason)`` in the
    returned steps' indices."""
    steps = list(steps)
    readers = {st.out: set() for st in steps if isinstance(st, MatmulStep)}
    for k, st in enumerate(steps):    # product -> indices of the live steps reading it
        for b in reads(st):
            if b in readers:
                readers[b].add(k)
    refused = []
    for m, st in enumerate(steps):
        if not isinstance(st, MatmulStep):
            continue
        users = sorted(readers[st.out])
        kernels = [r for r in users if _reads_in_a_kernel(steps[r], st.out)]
        if not kernels:
            continue                  # no pointwise consumer to fold
        why = _why_no_epilogue(st, steps, users, buffers, capabilities, policy)
        if why:
            refused.append((m, kernels, why))
            continue
        (r,) = users
        spec = steps[r].spec
        (use,) = [i for i in spec.inputs if i.buffer == st.out]
        # the product becomes input 0 of the epilogue
        order = [spec.inputs.index(use)] + [k for k, i in enumerate(spec.inputs) if i is not use]
        slot = {old: new for new, old in enumerate(order)}
        body = tuple(Stmt(b.id, b.op, b.dtype, b.args, slot[b.attr]) if b.op == "load" else b
                     for b in spec.body)
        epilogue = KernelSpec(spec.name.replace("_fused_", "_matmul_", 1), spec.domain, (),
                              tuple(spec.inputs[k] for k in order), spec.scalars, body,
                              spec.outputs, "matmul, then " + spec.comment, spec.scalar_params,
                              _prefixed("matmul, then ", spec.comment_parts))
        for b in reads(steps[r]):
            if b in readers:
                readers[b].discard(r)
        steps[m] = MatmulStep(st.a, st.b, st.out, epilogue)
        steps[r] = None               # its reads are now the matmul's
        for b in reads(steps[m]):
            if b in readers:
                readers[b].add(m)
    if None not in steps:
        return steps, [(EPILOGUE, (m, *rs), why) for m, rs, why in refused]
    kept = [k for k, st in enumerate(steps) if st is not None]
    new = {old: k for k, old in enumerate(kept)}
    return ([steps[k] for k in kept],
            [(EPILOGUE, (new[m],) + tuple(new[r] for r in rs), why) for m, rs, why in refused])


def _reads_in_a_kernel(step, buffer) -> bool:
    if isinstance(step, KernelStep):
        return any(i.buffer == buffer for i in step.spec.inputs)
    return isinstance(step, MatmulStep) and step.epilogue is not None and any(
        i.buffer == buffer for i in step.epilogue.inputs[1:])


def _why_no_epilogue(st, steps, users, buffers, capabilities, policy) -> str:
    """Why the kernel reading matmul ``st``'s product stays a kernel of its own
    ('' when it folds)."""
    if not capabilities.matmul_epilogue:
        return (f"matmul runs in {capabilities.matmul_engine}, which has no epilogue: "
                "the product is stored and read back")
    shape = buffers[st.out].shape
    if buffers[st.out].kind != "scratch":
        return "the product is a graph output, stored whole"
    if len(users) != 1:
        return f"the product is read by {len(users)} steps; an epilogue is one kernel"
    reader = steps[users[0]]
    if not isinstance(reader, KernelStep):
        return "the kernel reading it runs in another matmul's epilogue"
    spec = reader.spec
    uses = [i for i in spec.inputs if i.buffer == st.out]
    if spec.reduce_axes:
        return "the kernel reading it reduces; an epilogue is pointwise"
    if any(st.op == "gather" for st in spec.body):
        return "the kernel reading it gathers; an epilogue loads only at the product's element"
    if tuple(spec.domain) != tuple(shape):
        return (f"the kernel reading it runs over {list(spec.domain)}, the product is "
                f"{list(shape)}")
    if len(uses) != 1 or uses[0].index != IndexMap(0, S.contiguous_strides(shape)):
        return "the kernel reading it does not read the product element for element"
    if not policy.fold_epilogue(spec):
        return f"{type(policy).__name__}.fold_epilogue declined"
    return ""


def _closures(steps):
    """(deps, users): bit w of ``deps[k]`` is set when step k reads, directly or
    through other steps, what step w writes; ``users[w]`` is the converse.
    Bit sets as Python ints: the closure of a plan of n steps costs n * n / 64
    word operations, where sets of indices would cost n * n / 2 hashings."""
    inputs = _step_inputs(steps)
    order = [k for k in _topological(steps, inputs) if steps[k] is not None]
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


def merge_siblings(steps, policy):
    """Kernels over the same domain and reduce axes that read a common buffer
    and do not depend on each other become one loop (sum and max of x, mean
    and var, y = x + 1 and z = x * 2) where ``policy.merge_siblings`` agrees.
    Pairs merge in the order (first step, second step), one at a time: each
    merge takes the first pair, in that order, of the steps as they are then.
    Returns the steps and ``merged``: the index of each given step that now
    runs inside another -> the index of that one's first given step."""
    return _SiblingMerge(steps, policy).run()


class _SiblingMerge:
    """:func:`merge_siblings` without starting over after each merge.

    A merge of b into a changes only a (its spec, keys and dependencies), and
    dependencies only grow: every pair with a first step other than a that
    was refused stays refused, except a pair (a', a) with a' < a, which a's
    new keys or spec may allow. So a heap holds the first steps whose pairs
    are still to look at, smallest first: all kernels at the start, then after
    each merge a and the earlier kernels sharing a key with it. A step taken
    off the heap has no mergeable pair with any step before it taken off, so
    the first pair found is the first pair of the whole plan, as a search from
    step 0 after each merge would find (the policy is a function of the two
    kernels). Steps keep their given index; a merged step's slot holds None.
    """

    def __init__(self, steps, policy):
        self.steps, self.policy = list(steps), policy
        # per step: its sibling keys (None for a step that is not a kernel),
        # computed once: a kernel's body is scanned once for is_scan
        self.keys = [_sibling_keys(st.spec) if isinstance(st, KernelStep) else None
                     for st in self.steps]
        self.readers = {}             # sibling key -> bit set of the live kernels it keys
        for k, keys in enumerate(self.keys):
            for key in keys or ():
                self.readers[key] = self.readers.get(key, 0) | (1 << k)
        self.deps = self.users = None  # the closures, made on the first candidate pair
        self.members = {}             # step -> the given steps merged into it

    def siblings(self, a) -> int:
        """Bit set of the live kernels sharing a sibling key with kernel a."""
        found = 0
        for key in self.keys[a]:
            found |= self.readers[key]
        return found & ~(1 << a)

    def run(self):
        steps = self.steps
        todo = [k for k, keys in enumerate(self.keys) if keys is not None]  # sorted: a heap
        queued = set(todo)
        while todo:
            a = heapq.heappop(todo)
            queued.discard(a)
            if steps[a] is None:
                continue              # merged into an earlier step
            b = self.first_partner(a)
            if b is None:
                continue
            self.merge(a, b)
            for k in (a, *_bits(self.siblings(a) & ((1 << a) - 1))):
                if k not in queued:
                    queued.add(k)
                    heapq.heappush(todo, k)
        merged = {k: into for into, ks in self.members.items() for k in ks}
        return [st for st in steps if st is not None], dict(sorted(merged.items()))

    def first_partner(self, a):
        """The first later kernel b that kernel a may merge with and that the
        policy merges it with, or None."""
        later = self.siblings(a) >> (a + 1)
        if not later:
            return None
        if self.deps is None:         # only plans with siblings pay for the closure
            self.deps, self.users = _closures(self.steps)
        later &= ~((self.deps[a] | self.users[a]) >> (a + 1))
        spec = self.steps[a].spec
        while later:
            b = a + (later & -later).bit_length()
            if self.policy.merge_siblings(spec, self.steps[b].spec):
                return b
            later &= later - 1
        return None

    def merge(self, a, b):
        steps, keys = self.steps, self.keys
        steps[a] = KernelStep(merge_kernels(steps[a].spec, steps[b].spec))
        steps[b] = None
        for key in keys[b]:
            self.readers[key] = (self.readers.get(key, 0) & ~(1 << b)) | (1 << a)
        keys[a] = keys[a] | keys[b]
        keys[b] = None
        self.members[a] = self.members.get(a, []) + [b] + self.members.pop(b, [])
        # what reads a or b now reads the merged step, which reads what both
        # read: a step that depended on one of them now depends on what the other
        # depends on (and on a), and the converse. Only the steps that depended
        # on one and not the other change: siblings that read the same values
        # mostly share what they depend on, and a deep graph is not walked per
        # merge. (b's bit is left stale: b is no candidate any more.)
        deps, users = self.deps, self.users
        bit = 1 << a
        da, db, ua, ub = deps[a], deps[b], users[a], users[b]
        for y in _bits(ua & ~ub):
            deps[y] |= db
        for y in _bits(ub & ~ua):
            deps[y] |= da | bit
        for x in _bits(da & ~db):
            users[x] |= ub
        for x in _bits(db & ~da):
            users[x] |= ua | bit
        deps[a], users[a] = da | db, ua | ub


def _bits(mask):
    """The indices of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _sibling_keys(spec):
    # a scan and a reduction over the same axis lay out their rows differently
    scan = is_scan(spec)
    return frozenset((spec.domain, spec.reduce_axes, scan, i.buffer) for i in spec.inputs)


def sibling_refusals(steps, policy) -> list:
    """``(SIBLING, (a, b), reason)`` for kernels a and b, consecutive readers of
    a common buffer, that run as separate loops."""
    readers = {}                      # buffer -> the kernels reading it, in step order
    for k, st in enumerate(steps):
        if isinstance(st, KernelStep):
            for i in st.spec.inputs:
                ks = readers.setdefault(i.buffer, [])
                if not ks or ks[-1] != k:
                    ks.append(k)
    pairs = dict.fromkeys((ks[j], ks[j + 1]) for ks in readers.values()
                          for j in range(len(ks) - 1))
    refused, deps, scans = [], None, {}
    for a, b in pairs:
        first, second = steps[a].spec, steps[b].spec
        for k in (a, b):              # once per kernel: is_scan reads the whole body
            if k not in scans:
                scans[k] = is_scan(steps[k].spec)
        if first.domain != second.domain:
            why = (f"they run over different domains {list(first.domain)} and "
                   f"{list(second.domain)}")
        elif scans[a] != scans[b]:
            why = "one scans an axis, the other does not: their loops differ"
        elif first.reduce_axes != second.reduce_axes:
            why = (f"they reduce different axes {list(first.reduce_axes)} and "
                   f"{list(second.reduce_axes)}")
        else:
            if deps is None:
                deps = _closures(steps)[0]
            if deps[b] >> a & 1 or deps[a] >> b & 1:
                early, late = (first, second) if deps[b] >> a & 1 else (second, first)
                why = (f"{late.name} reads what {early.name} writes, directly or through "
                       "other steps")
            else:
                why = f"{type(policy).__name__}.merge_siblings declined"
        refused.append((SIBLING, (a, b), why))
    return refused


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
        if s.op in ("load", "gather"):  # a gather's attr starts with its source's slot
            inp = b.inputs[attr if s.op == "load" else attr[0]]
            key = (inp.buffer, inp.index)
            if key not in slot:
                slot[key] = len(inputs)
                inputs.append(inp)
            attr = slot[key] if s.op == "load" else (slot[key],) + attr[1:]
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
                      tuple(sparams), a.comment_parts + b.comment_parts)


def _prefixed(text, parts) -> tuple:
    """Comment ``parts`` with ``text`` before the first."""
    return ((text + parts[0][0], parts[0][1]),) + parts[1:] if parts else parts


def writes(step):
    if isinstance(step, KernelStep):
        return [o.buffer for o in step.spec.outputs]
    if isinstance(step, MatmulStep) and step.epilogue is not None:
        return [step.out] + [o.buffer for o in step.epilogue.outputs]
    return [step.out]


def reads(step):
    if isinstance(step, KernelStep):
        return [i.buffer for i in step.spec.inputs]
    if isinstance(step, MatmulStep):
        extra = [i.buffer for i in step.epilogue.inputs[1:]] if step.epilogue else []
        return [step.a.buffer, step.b.buffer] + extra
    return [v.buffer for v in step.inputs]
