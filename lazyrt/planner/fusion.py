"""The fusion planner: Graph -> Plan (buffers and a list of steps).

What becomes a buffer ("realized"): parameters, the operands and results of
matmuls and opaque movement ops (concat, setslice), graph outputs, whatever
a kernel cannot compute in place, and shared producers the policy stores
rather than recompute — each with a reason the debug output shows.
Everything else is fused:

* views (reshape, permute, expand, slice) fold into index maps;
* any DAG of pointwise ops is one kernel; results needed outside it are
  extra outputs of the same loop (multi-output kernels);
* a reduction fuses with its pointwise producers, and with the pointwise
  consumers that broadcast its result back over the reduced axes, so row
  softmax, layer norm and ``x - x.mean(axis)`` are one kernel each;
* a scan (cumsum) fuses with its pointwise producers; its result is stored
  and its consumers read it from memory;
* where the backend's kernels can (``Capabilities.gather_in_kernels``), a
  gather fuses into the kernels that use it: they load its indices and read
  its source at them (both stored, the indices range-checked before the launch).

Legality lives in :class:`KernelBuilder` (an illegal fusion raises
:class:`Replan` naming the node to realize and why) and in the backend's
:class:`Capabilities`; profitability in :class:`FusionPolicy` (``policy.py``). Every fusion
not taken is a :class:`Refusal` in the plan, with its reason. The planner
sees only the Graph, never tensors.
"""
from __future__ import annotations

import contextlib
import gc
import heapq
import threading
from dataclasses import replace

from .. import dtypes as D
from .. import ops
from . import strided as S
from .kernel_builder import KernelBuilder, Replan
from .kernel_ir import KernelInput, KernelOutput, coalesce
from .policy import FusionPolicy, size_text
from .schedule import (DEPTH, LEGALITY, RECOMPUTE, Buffer, BufferView, Capabilities,
                       KernelStep, MatmulStep, OpaqueStep, Plan, Refusal, fold_epilogues,
                       merge_siblings, order_steps, reads, sibling_refusals, writes)


class _Recompute(Exception):
    """The policy stores these shared producers: node -> (RECOMPUTE, reason)."""
    def __init__(self, stored):
        super().__init__(f"{len(stored)} shared producers stored")
        self.stored = stored



_stores = threading.local()


@contextlib.contextmanager
def plan_store(store):
    """Within it, on this thread, :func:`plan` with the default policy asks
    ``store.load(graph, capabilities)`` for a plan first, and gives what it
    plans to ``store.save(graph, capabilities, plan)``: how a backend's compile
    keeps plans on disk (:mod:`lazyrt.plan_cache`). None: no store."""
    previous = getattr(_stores, "store", None)
    _stores.store = store
    try:
        yield
    finally:
        _stores.store = previous


def plan(graph, capabilities: Capabilities = Capabilities(),
         policy: FusionPolicy | None = None) -> Plan:
    """Plan ``graph`` for a backend whose steps can do ``capabilities`` (the
    default: matmuls in BLAS, without an epilogue), taking the fusions
    ``policy`` (default :class:`FusionPolicy`) finds profitable.

    >>> plan(graph, Capabilities(matmul_epilogue=True, matmul_engine="a Triton matmul kernel"))
    """
    store = getattr(_stores, "store", None) if policy is None else None
    if store is not None:
        kept = store.load(graph, capabilities)
        if kept is not None:
            return kept
    the_plan = _plan(graph, capabilities, policy)
    if store is not None:
        store.save(graph, capabilities, the_plan)
    return the_plan


def _plan(graph, capabilities, policy) -> Plan:
    # The planner allocates millions of small objects and frees nearly all of
    # them by reference count; Python's cycle collector, run every few thousand
    # allocations, walks every live object each full pass: a third of the time
    # on a 30k-op graph, and growing with it. Off while planning.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _Planner(graph, capabilities, policy or FusionPolicy()).run()
    finally:
        if collecting:
            gc.enable()


class _Planner:
    def __init__(self, graph, capabilities, policy):
        self.g = graph
        self.nodes = graph.nodes
        self.caps = capabilities
        self.policy = policy
        self.consumers = [[] for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                self.consumers[j].append(i)
        self.outputs = set(graph.outputs)
        # node -> (refusal kind, reason) for every value stored; the kind is
        # None where storing it refuses no fusion (a matmul's product)
        self.must: dict[int, tuple] = {}
        depth = [0] * len(self.nodes)
        for i, n in enumerate(self.nodes):
            if n.op.kind in (ops.POINTWISE, ops.VIEW, ops.REDUCTION):
                depth[i] = 1 + max((depth[j] for j in n.inputs), default=0)
                if depth[i] > policy.max_fused_depth:
                    self.must[i] = (DEPTH, f"a chain of {policy.max_fused_depth} fused ops is "
                                    "stored before the next kernel continues it")
                    depth[i] = 0
        engine = capabilities.matmul_engine
        for i, n in enumerate(self.nodes):
            if n.op.kind == ops.SCAN:
                # a scan kernel stores its running values; what uses them is another kernel
                self.must[i] = (LEGALITY, f"{n.op.name} is a scan: its kernel stores the "
                                "running values and its consumers read them")
                continue
            if n.op.kind == ops.MATMUL:
                self.must[i] = (None, f"matmul runs in {engine}; " + (
                    "a pointwise consumer may run in its epilogue"
                    if capabilities.matmul_epilogue else "its epilogue fuses into the next kernel"))
                operand = f"operand of matmul: {engine} reads it from memory"
            elif self.opaque(n):
                self.must[i] = (LEGALITY, f"{n.op.name} runs outside generated kernels")
                operand = f"operand of {n.op.name}, which runs on the host"
            elif n.op is ops.GATHER:  # fused: kernels load its source at loaded indices
                operand = ("source of a gather: kernels read it at the indices they load",
                           "indices of a gather: their range is checked before the kernel runs")
            else:
                continue
            if isinstance(operand, str):
                operand = (operand,) * len(n.inputs)
            for j, why in zip(n.inputs, operand):
                base, _ = self.view_base(j)
                if not self.is_buffer_node(base):
                    self.must.setdefault(base, (LEGALITY, why))
        #: matmul node -> its product's layout in a transposed buffer (see
        #: :meth:`read_transposed`); every other buffer node is contiguous
        self.layouts = {i: S.transposed(S.Strided.contiguous(_swapped(n.shape)))
                        for i, n in enumerate(self.nodes)
                        if capabilities.matmul_transposed_out and self.read_transposed(i)}
        #: (node, view chain) -> its view (:meth:`KernelBuilder.view_of`), or the
        #: node a reshape in the chain needs stored: the same for every kernel and attempt
        self.views = {}
        #: root -> its kernel's last build (:meth:`kernel`), buffers named by node
        self.built = {}

    def read_transposed(self, i) -> bool:
        """Whether node ``i`` is a matmul whose product only transposing views
        read (the last two axes swapped): autograd's weight gradient of a linear
        layer is ``(x^T @ grad)^T``, and AdamW then read it with a stride per
        element (0.53 ms for 784x512 float32 where a contiguous read takes ~0.3).
        The product may be an output too (torch's functionalization keeps a view's
        base alive): it is then returned as a strided view of the buffer. A
        transpose read only by a transpose back (``t(t(mm))``: an AOT backward's
        weight gradient, an output) reads the product as it is: it stays contiguous,
        as the gradient's parameter is (autograd copies a gradient whose strides
        differ from its parameter's)."""
        n = self.nodes[i]
        if n.op.kind != ops.MATMUL or len(n.shape) < 2 or not self.consumers[i]:
            return False
        swap = S.swap_last(len(n.shape))

        def is_swap(c):
            return self.nodes[c].op.name == "permute" and tuple(self.nodes[c].attrs[0]) == swap
        return all(is_swap(c) for c in self.consumers[i]) and any(
            c in self.outputs or not self.consumers[c] or
            not all(is_swap(d) for d in self.consumers[c]) for c in self.consumers[i])

    # -- helpers --
    def layout(self, i) -> S.Strided:
        """Buffer node ``i``'s value as a view of its buffer: contiguous, or
        transposed for a product stored so (:attr:`layouts`)."""
        return self.layouts.get(i) or S.Strided.contiguous(self.nodes[i].shape)

    def opaque(self, n) -> bool:
        """Whether node ``n`` is a step of its own that no kernel computes."""
        return n.op.kind == ops.OPAQUE and not (n.op is ops.GATHER
                                                and self.caps.gather_in_kernels)

    def view_base(self, i):
        """Follow view ops down to the node they view; returns (base, view chain)."""
        chain = []
        while self.nodes[i].op.kind == ops.VIEW and i not in self.must:
            chain.append(i)
            i = self.nodes[i].inputs[0]
        return i, tuple(reversed(chain))

    def is_buffer_node(self, i) -> bool:
        return self.nodes[i].op is ops.DATA or i in self.must

    def strided_through(self, base, chain):
        v = self.layout(base)
        for c in chain:
            n = self.nodes[c]
            w = S.apply_view(v, n.op.name, n.attrs)
            if w is None:
                raise Replan(n.inputs[0], "reshape of a non-contiguous view needs a copy")
            v = w
        return v

    def run(self) -> Plan:
        probed = False
        for _ in range(4 * len(self.nodes) + 4):
            try:
                return self._attempt()
            except _Recompute as r:
                self.must.update(r.stored)
            except Replan as r:
                if r.node in self.must:
                    raise AssertionError(f"lazyrt internal: planner loops on %{r.node}")
                self.must[r.node] = (LEGALITY, r.reason)
                if not probed:
                    self._probe()  # the replans still to come, at a fraction of the cost
                    probed = True
        raise AssertionError("lazyrt internal: planner did not converge")

    def _probe(self):
        """Add to ``must`` the nodes ``run``'s attempts would add, one Replan
        at a time, without their cost. An attempt starts over from the first
        kernel each time, so a chain of n replans (a transpose or a row softmax
        per layer) cost n whole attempts. Here the kernels are built in the
        same order and each build is remembered with the nodes whose buffer
        status it consulted; after a replan, the work goes back only to the
        first kernel that consulted the new buffer node (the one that failed,
        usually), reusing every build since that is still valid. Node numbers
        stand for buffer numbers; ``_attempt`` then builds the plan once."""
        looked = set()   # nodes whose buffer status the current build consulted

        def is_buffer_node(i):
            looked.add(i)
            return _Planner.is_buffer_node(self, i)

        def view_base(i):
            base, chain = _Planner.view_base(self, i)
            looked.update(chain)
            looked.add(base)
            return base, chain

        self.is_buffer_node, self.view_base = is_buffer_node, view_base
        try:
            builds = {}  # root -> (nodes consulted, side outputs) of a still valid build
            readers = {}  # node -> roots whose remembered build consulted it
            for _ in range(4 * len(self.nodes) + 4):
                if self._probe_pass(looked, builds, readers):
                    return
        except Replan:
            return  # a node replanned twice: _attempt reports it
        finally:
            del self.is_buffer_node, self.view_base

    def _probe_pass(self, looked, builds, readers) -> bool:
        """Every root once, as ``_attempt`` visits them; False when an output's
        view changed and the pass must start over."""
        nodes, must = self.nodes, self.must
        looked.clear()
        roots = set(must)
        for o in self.g.outputs:
            base, _ = self.view_base(o)
            if not (self.is_buffer_node(base) and base != o or nodes[o].op is ops.DATA):
                roots.add(o)
        for_outputs = set(looked)
        scalars = [p for p in self.g.params if nodes[p].op is ops.SCALAR]
        scalar_of = {p: k for k, p in enumerate(scalars)}
        buf_of = {p: p for p in self.g.params if p not in scalar_of}
        buf_of.update((i, i) for i in roots)
        todo = [-i for i in roots]         # a max-heap: consumers first, as in _attempt
        heapq.heapify(todo)
        done, position = [], {}            # roots visited, in order, and their places
        stored = {}                        # side output -> how many visited kernels store it
        while todo:
            i = -heapq.heappop(todo)
            sides = ()
            if not stored.get(i) and i not in builds:
                looked.clear()
                try:
                    sides = self._probe_build(i, buf_of, scalar_of)
                except Replan as r:
                    if r.node in must:
                        raise
                    must[r.node] = (LEGALITY, r.reason)
                    stale = [k for k in readers.pop(r.node, ()) if builds.pop(k, None)]
                    if r.node in for_outputs or r.node >= i:
                        return False
                    heapq.heappush(todo, -i)
                    if r.node not in buf_of:
                        buf_of[r.node] = r.node
                        heapq.heappush(todo, -r.node)
                    first = min((position[k] for k in stale if k in position), default=None)
                    while first is not None and len(done) > first:
                        k, k_sides = done.pop()   # visited again, after the new buffer
                        del position[k]
                        for j in k_sides:
                            stored[j] -= 1
                        heapq.heappush(todo, -k)
                    continue
                builds[i] = (frozenset(looked), sides)
                for j in looked:
                    readers.setdefault(j, set()).add(i)
            elif not stored.get(i):
                sides = builds[i][1]
            position[i] = len(done)
            done.append((i, sides))
            for j in sides:
                stored[j] = stored.get(j, 0) + 1
        return True

    def _probe_build(self, i, buf_of, scalar_of):
        """Build root i's step as ``_attempt`` would; its side outputs."""
        n = self.nodes[i]
        if n.op.kind == ops.MATMUL or self.opaque(n):
            for j in n.inputs:
                self.buffer_view(j, buf_of)
            return frozenset()
        return self.kernel(i, buf_of, scalar_of).side_outputs

    def kernel(self, i, buf_of, scalar_of):
        """Root i's :class:`BuiltKernel`, its buffers named by graph node: the
        last build (an earlier attempt's, the probe's) where every question it
        asked of the plan gets the same answer now, else a new build. A plan of
        replans builds each kernel about once, not once per attempt."""
        kept = self.built.get(i)
        if kept is not None and kept.holds(self, buf_of):
            return kept
        got = self.built[i] = KernelBuilder(self, i, _NodeNames(buf_of), scalar_of, 0).built()
        return got

    def _attempt(self) -> Plan:
        nodes = self.nodes
        buffers, buf_of = [], {}

        def new_buffer(i, kind):
            shape = _swapped(nodes[i].shape) if i in self.layouts else nodes[i].shape
            b = Buffer(len(buffers), nodes[i].dtype, shape, kind, i)
            buffers.append(b)
            buf_of[i] = b.id
            return b.id

        param_buffers, scalar_slot, n_scalars = [], [], 0
        scalar_of = {}
        for p in self.g.params:
            if nodes[p].op is ops.SCALAR:
                param_buffers.append(-1)
                scalar_slot.append(n_scalars)
                scalar_of[p] = n_scalars
                n_scalars += 1
            else:
                param_buffers.append(new_buffer(p, "param"))
                scalar_slot.append(-1)

        # outputs that are views of a buffer need no kernel
        output_views = {}
        roots = set(self.must)  # a set: a long chain has thousands of roots
        for o in self.g.outputs:
            base, chain = self.view_base(o)
            if self.is_buffer_node(base) and base != o or nodes[o].op is ops.DATA:
                output_views[o] = (base, chain)
            else:
                roots.add(o)
        for i in sorted(roots):
            kind = "output" if i in self.outputs else "scratch"
            new_buffer(i, kind)
        for base, _ in output_views.values():
            if base in buf_of and buffers[buf_of[base]].kind == "scratch":
                b = buffers[buf_of[base]]
                buffers[b.id] = Buffer(b.id, b.dtype, b.shape, "output", b.node)

        steps, stored = [], set()
        kernel_no = 0
        computed = []  # per step: the nodes it computes (a kernel's, else none)
        # consumers first: a kernel that computes another output inline stores it
        for i in sorted(roots, reverse=True):
            if i in stored:
                continue
            n = nodes[i]
            if n.op.kind == ops.MATMUL:
                a, b = (self.buffer_view(j, buf_of) for j in n.inputs)
                steps.append(MatmulStep(a, b, buf_of[i], transposed=i in self.layouts))
                computed.append(())
                continue
            if self.opaque(n):
                ins = tuple(self.buffer_view(j, buf_of) for j in n.inputs)
                steps.append(OpaqueStep(n.op.name, ins, n.attrs, buf_of[i]))
                computed.append(())
                continue
            kb = self.kernel(i, buf_of, scalar_of)
            # a later root computed inside this kernel is stored here, not again
            stored.update(kb.side_outputs)
            steps.append(KernelStep(_numbered(kb.spec, buf_of, kernel_no)))
            computed.append(kb.computed)
            kernel_no += 1
        steps, merged = merge_siblings(steps, self.policy)
        shared = self.shared_to_store(computed, merged)
        if shared:
            raise _Recompute(shared)
        steps, refused = fold_epilogues(steps, buffers, self.caps, self.policy)
        order = order_steps(steps)
        position = {k: p for p, k in enumerate(order)}
        steps = [steps[k] for k in order]
        refused = [(kind, (position[m],) + tuple(sorted(position[k] for k in ks)), why)
                   for kind, (m, *ks), why in refused] + sibling_refusals(steps, self.policy)
        refusals = self.stored_value_refusals(steps, buf_of)
        refusals += [Refusal(kind, tuple(buffers[writes(steps[k])[0]].node for k in ks), ks, why)
                     for kind, ks, why in refused]
        steps = [KernelStep(coalesce(st.spec)) if isinstance(st, KernelStep) else st
                 for st in steps]

        outputs = []
        for o in self.g.outputs:
            if o in output_views:
                base, chain = output_views[o]
                outputs.append(BufferView(buf_of[base], self.strided_through(base, chain)))
            else:
                outputs.append(BufferView(buf_of[o], self.layout(o)))
        unfused = tuple((i, r) for i, (_, r) in sorted(self.must.items()))
        return Plan(tuple(buffers), tuple(steps), tuple(param_buffers), tuple(scalar_slot),
                    n_scalars, tuple(outputs), unfused,
                    tuple(sorted(refusals, key=lambda r: (r.steps, r.kind))), self.g, self.caps)

    def shared_to_store(self, computed, merged) -> dict:
        """The shared producers ``policy.inline_shared`` stores rather than have
        every kernel that needs them recompute them (kernels merged as siblings
        count once): node -> (RECOMPUTE, reason)."""
        first, kernels = {}, {}  # node -> first kernel computing it; -> all, when several
        for k, nodes in enumerate(computed):
            g = merged.get(k, k)
            for i in nodes:
                if first.setdefault(i, g) != g:
                    kernels.setdefault(i, {first[i]}).add(g)
        stored, covered = {}, set()
        # consumers first: once one is stored, its producers are needed by fewer
        # kernels. A store the op count asks for covers its subtree until the next
        # attempt; one the bytes ask for is decided now for the whole subtree too
        # (a kernel that reads the stored value no longer computes what it reads),
        # so a long chain is decided in one attempt, not one link per attempt
        relieved = {}  # producer -> kernels that now read a stored consumer instead
        for i in sorted(kernels, reverse=True):
            if i in covered or self.nodes[i].op.kind not in (ops.POINTWISE, ops.REDUCTION):
                continue
            sub = self.inline_subtree(i, stop=stored)
            n_ops = sum(self.nodes[j].op.kind in (ops.POINTWISE, ops.REDUCTION) for j in sub)
            n = len(kernels[i] - relieved.get(i, set())) or 1
            read, value = self.subtree_bytes(i, sub)
            if not self.policy.inline_shared(n, n_ops, read, value):
                by_bytes = self.policy.inline_shared(n, n_ops)
                stored[i] = (RECOMPUTE, f"{n} kernels need it: recomputing its {n_ops} ops in "
                             + (f"each (reading {size_text(read)}) moves "
                                f"{size_text((n - 1) * read - n * value)} more than storing it "
                                f"({size_text(value)})" if by_bytes
                                else "each costs more than storing it")
                             + f" ({type(self.policy).__name__}.inline_shared)")
                if not by_bytes:
                    covered |= sub
                    continue
                readers = kernels[i] - {first[i]}
                for j in sub - {i}:
                    relieved.setdefault(j, set()).update(readers)
        return stored

    def subtree_bytes(self, i, sub) -> tuple:
        """``(read, value)``: the bytes computing node i reads from stored values
        (each in full: a bias row once, a reduction's input all of it), and the
        bytes storing it writes."""
        size = _numel(self.nodes[i].shape)
        leaves = {j for k in sub for j in self.nodes[k].inputs
                  if j not in sub and self.nodes[j].op is not ops.CONST}
        read = sum(_numel(self.nodes[j].shape) * D.DTYPES[self.nodes[j].dtype].itemsize
                   for j in leaves)
        return float(read), size * D.DTYPES[self.nodes[i].dtype].itemsize

    def inline_subtree(self, i, stop=()) -> set:
        """Node i and the nodes a kernel computes with it, down to stored values
        (and the nodes in ``stop``)."""
        sub, stack = {i}, [i]
        while stack:
            for j in self.nodes[stack.pop()].inputs:
                if j not in sub and j not in stop and not self.is_buffer_node(j):
                    sub.add(j)
                    stack.append(j)
        return sub

    def stored_value_refusals(self, steps, buf_of) -> list:
        """A Refusal for every value stored because a fusion was refused: its
        producer and the nodes that use it, the step that writes it and those
        that read it (none for an output nothing else uses: nothing was refused)."""
        refused = {buf_of[i]: (i, kind, reason) for i, (kind, reason) in self.must.items()
                   if kind is not None}
        writer, readers = {}, {}
        for k, st in enumerate(steps):
            for b in writes(st):
                if b in refused:
                    writer[b] = k
            for b in reads(st):
                if b in refused:
                    ks = readers.setdefault(b, [])
                    if not ks or ks[-1] != k:
                        ks.append(k)
        return [Refusal(kind, (i,) + users, (writer[b],) + tuple(readers.get(b, ())), reason)
                for b, (i, kind, reason) in refused.items() if (users := self.users_of(i))]

    def users_of(self, i) -> tuple:
        """The nodes that use node i's value, seen through views (a view nothing
        uses, an output, is a user)."""
        users, stack = set(), list(self.consumers[i])
        while stack:
            j = stack.pop()
            if self.nodes[j].op.kind == ops.VIEW and j not in self.must and self.consumers[j]:
                stack.extend(self.consumers[j])
            else:
                users.add(j)
        return tuple(sorted(users))

    def buffer_view(self, i, buf_of) -> BufferView:
        base, chain = self.view_base(i)
        if base not in buf_of:
            raise AssertionError(f"lazyrt internal: operand %{i} has no buffer")
        return BufferView(buf_of[base], self.strided_through(base, chain))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class _NodeNames:
    """The nodes that have a buffer, each named by itself: a kernel is built with
    its buffers named by graph node, so that another attempt, which numbers the
    buffers anew, can reuse it (:func:`_numbered`)."""
    __slots__ = ("buf_of",)

    def __init__(self, buf_of):
        self.buf_of = buf_of

    def __contains__(self, i) -> bool:
        return i in self.buf_of

    def __getitem__(self, i):
        self.buf_of[i]  # a node without a buffer fails here, as it would have
        return i


def _numbered(spec, buf_of, number):
    """Kernel ``spec``, its buffers named by node, as kernel ``number`` of a plan
    whose buffers ``buf_of`` numbers."""
    return replace(spec, name=f"k{number}_{spec.name.split('_', 1)[1]}",
                   inputs=tuple(KernelInput(buf_of[i.buffer], i.dtype, i.index)
                                for i in spec.inputs),
                   outputs=tuple(KernelOutput(buf_of[o.buffer], o.dtype, o.index, o.value)
                                 for o in spec.outputs))


def _swapped(shape) -> tuple:
    return tuple(shape[:-2]) + (shape[-1], shape[-2])
