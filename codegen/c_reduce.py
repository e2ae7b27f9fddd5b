"""The reduction half of the C emitter: loops over a kernel's reduce axes.

:class:`ReductionEmitter` is mixed into :class:`codegen.c._Emitter`, which
owns the kernel's structure, expressions and pointwise loops. Here: the
passes over a row (softmax: max, then the sum of exp, then the normalized
store), the row buffers that keep a costly element value between passes,
accumulators (float sums in double, max/min with a NaN flag so the loop still
vectorizes), full reductions read as several streams per thread, blocked
float row sums and the next-row prefetch of compute-bound passes.
"""
from __future__ import annotations

from lazyrt import dtypes as D
from lazyrt import ops
from lazyrt.lowering.c import (_COMPUTE_T, EmitError, _is_float,
                               identity_literal)
from lazyrt.ops import Combine

from .layout import combine_of, fold_op

#: the C operator of a combine that has one (``acc op= x``)
_C_OPERATOR = {Combine.SUM: "+", Combine.PROD: "*", Combine.ANY: "|", Combine.ALL: "&"}
#: OpenMP's reduction identifier of each combine an accumulator folds by
_OMP_REDUCTION = {**_C_OPERATOR, Combine.MAX: "max", Combine.MIN: "min"}
_EXTREMES = (Combine.MAX, Combine.MIN)
_INDEX = (Combine.ARGMAX, Combine.ARGMIN)  # first index: a serial walk, no accumulator


def is_costly(st, divides=False) -> bool:
    """Whether statement ``st`` is an op of the op table's costly class (tens of
    cycles per element); with ``divides``, divisions count too."""
    cost = getattr(st.op, "cost", None)  # load/scalar/const/reduce have none
    return cost == ops.COSTLY or (divides and cost == ops.DIVIDES)

#: read streams per thread of a full reduction: Zen 1 needs several concurrent
#: streams per core to reach its bandwidth (sum(x*x), 2^24 float32, 2 threads:
#: 1 stream 3.4 ms, 4 streams 2.6 ms, 8 streams 3.9 ms)
FULL_STREAMS = 4

#: elements per block of a row pass: float32 sums add a block in float (each of
#: 8 lanes adds 16 values) and the block's total in double
ROW_BLOCK = 128

#: neighbouring columns a column sum adds at once (:meth:`ReductionEmitter.column_body`)
COLUMN_LANES = 64

#: rows up to this size are prefetched for the next row during a compute-bound
#: pass (larger ones would not stay in L2 until the next row reads them)
PREFETCH_ROW_BYTES = 128 << 10


class ReductionEmitter:
    """Reduction passes; expects the attributes and helpers of ``_Emitter``."""

    def row_cache_plan(self, elem_outs) -> list[int]:
        """Expensive element values of the last reduction pass that the store
        pass needs again (softmax's exp): kept in a per-thread row buffer
        instead of recomputed."""
        if len(self.red) != 1 or not self.outer or not elem_outs:
            return []
        computed = set()
        for st in self.layout.passes[-1]:
            computed.update(self._closure([st.args[0]]))
        final = self._closure([o.value for _, o in elem_outs])
        pricey = self._pricey()
        cands = {c for c in final & computed if self.elem[c] and pricey[c]}
        users = {c: [u.id for u in self.s.body if c in u.args and u.id in final] for c in cands}
        keep = [c for c in sorted(cands)
                if any(u not in cands for u in users[c]) or
                any(o.value == c for _, o in elem_outs)]
        return keep

    def _closure(self, targets) -> set:
        out, stack = set(), list(targets)
        while stack:
            sid = stack.pop()
            if sid in out:
                continue
            out.add(sid)
            st = self.s.body[sid]
            if not (st.op == "reduce" and self.red):
                stack.extend(st.args)
        return out

    def _pricey(self) -> list[bool]:
        out = [False] * len(self.s.body)
        for st in self.s.body:
            if st.op == "reduce":
                continue
            out[st.id] = is_costly(st) or any(out[a] for a in st.args)
        return out

    def reduction_body(self):
        s = self.s
        row_outs = [(k, s.outputs[k]) for k in self.layout.row_outputs]
        elem_outs = [(k, s.outputs[k]) for k in self.layout.elem_outputs]
        if self.column_form(elem_outs):
            self.cached = []
            return self.column_body(row_outs, elem_outs)
        self.cached = self.row_cache_plan(elem_outs)
        r = self.red[0] if self.red else 0
        # rows whose element outputs are contiguous along the row: stored in
        # tiles when the kernel is memory-bound (see streamable), or when its
        # costly ops all run in reduction passes and the store loop is cheap:
        # log_softmax (4096^2: 21.4 -> 19.5 ms). Not softmax, whose store loop
        # divides a row in L1 (streamed: +1 ms).
        store = [x for x in self.needed([o.value for _, o in elem_outs],
                                        stop=set(self.cached))
                 if self.elem[x] and x not in self.cached]
        stream = (len(self.red) == 1 and bool(self.outer)
                  and self.streamable([o for _, o in elem_outs], r, cheap_store=not any(
                      is_costly(s.body[x], divides=True) for x in store)))
        depth = 1
        if stream:
            self.declare_stream(depth, elem_outs, "total")
        if self.outer:
            collapse = f" collapse({len(self.outer)})" if len(self.outer) > 1 else ""
            if self.cached or stream:
                self.line(depth, "#pragma omp parallel if(parallel: lz_work > LZ_PAR_MIN)")
                self.line(depth, "{")
                depth += 1
                if stream:
                    self.declare_tiles(depth, elem_outs)
                for c in self.cached:
                    t = _COMPUTE_T[s.body[c].dtype]
                    self.line(depth, f"{t} *restrict t{c} = ({t} *)malloc(sizeof({t}) * "
                                     f"(size_t)(n{r} > 0 ? n{r} : 1));")
                self.line(depth, f"#pragma omp for{collapse} schedule(static)")
            else:
                self.line(depth, f"#pragma omp parallel for{collapse} "
                                 "if(parallel: lz_work > LZ_PAR_MIN) schedule(static)")
            top = depth
            for a in self.outer:
                self.line(depth, f"for (int64_t i{a} = 0; i{a} < n{a}; i{a}++) {{")
                depth += 1
        else:
            self.line(depth, "{")
            top = depth
            depth += 1
        passes = self.layout.passes
        for p, reduces in enumerate(passes, 1):
            last = p == len(passes)
            self.reduction_pass(reduces, depth, self.cached if last else (), last=last)
        self.compute(self.needed([o.value for _, o in row_outs]), depth, False)
        for k, o in row_outs:
            self.store(k, o, depth)
        if elem_outs:
            sids = self.needed([o.value for _, o in elem_outs], stop=set(self.cached))
            self.compute(sids, depth, False)
            if stream:
                def base(k, o):
                    return self.index(f"out{k}", o.index, {r: f"b{r}"})
                self.line(depth, f"for (int64_t b{r} = 0; b{r} < n{r}; b{r} += LZ_TILE) {{")
                self.open_tile(depth + 1, elem_outs, r, base)
                self.line(depth + 1, "#pragma omp simd")
                self.line(depth + 1, f"for (int64_t i{r} = b{r}; i{r} < e{r}; i{r}++) {{")
                inner = depth + 1
            else:
                self.open_reduce_loops(depth, [], parallel=not self.outer)
                inner = depth + len(self.red)
            for c in self.cached:
                self.line(inner + 1, f"{_COMPUTE_T[s.body[c].dtype]} v{c} = t{c}[i{r}];")
            self.compute([x for x in sids if x not in self.cached], inner + 1, True)
            for k, o in elem_outs:
                if stream:
                    self.tile_store(k, o, inner + 1, r)
                else:
                    self.store(k, o, inner + 1)
            if stream:
                self.line(depth + 1, "}")
                self.close_tile(depth + 1, elem_outs, r, base)
                self.line(depth, "}")
            else:
                self.close_loops(depth, len(self.red))
        for a in range(depth - 1, top - 1, -1):
            self.line(a, "}")
        if self.cached or stream:
            for c in self.cached:
                self.line(top, f"free(t{c});")
            if stream:
                self.line(top, "if (lz_stream) lz_stream_fence();")
            self.line(top - 1, "}")

    def column_form(self, elem_outs) -> bool:
        """Sums down the columns of a row-major array (a bias's gradient: the
        sum over axis 0 of (rows, features); a LayerNorm weight's: over the
        batch and sequence axes of (batch, seq, features)): reduce axes all read
        with a stride, one kept axis read contiguously. Kept index by kept
        index, each output was one strided column walk (10x NumPy's time at
        256x512; 0.7 ms for a 32x64x128 LayerNorm weight gradient, 6 GB/s);
        :meth:`column_body` walks rows and adds COLUMN_LANES neighbours at once.
        It visits each element once, in the order of a row-major array: an
        element output needing no sum (the embedding sum a LayerNorm's weight
        gradient also stores) is stored there, contiguously (a row per kept
        index, strided, was 0.3 ms for 512x128)."""
        o = self.outer[0] if len(self.outer) == 1 else None
        if o is None or any(self.layout.stage[out.value] or out.index.strides[o] != 1
                            for _, out in elem_outs):
            return False
        if len(self.layout.passes) != 1 or any(combine_of(st) is not Combine.SUM
                                               for st in self.layout.passes[0]):
            return False
        # a row gathered by an index that varies along the reduce axes (an
        # embedding's gradient-sized sums) varies along them as a strided walk does
        gathered = {st.attr[0] for st in self.s.body
                    if st.op == "gather" and self.elem[st.args[0]]}
        strides = [i.index.strides for i in self.s.inputs]
        # an input constant along the kept axis (a row's mean) is one value for all lanes
        lanes = [(k, st) for k, st in enumerate(strides) if st[o] != 0]
        return (all(st[r] != 1 for _, st in lanes for r in self.red)
                and any(st[o] == 1 and (k in gathered or any(st[r] != 0 for r in self.red))
                        for k, st in lanes))

    def column_body(self, row_outs, elem_outs=()):
        """Blocks of COLUMN_LANES neighbouring kept indices per OpenMP iteration; for
        each, the rows in order (the outer reduce axes as plain loops around the
        innermost one), each adding its lanes in one simd loop into a per-lane
        accumulator (float sums: in float per ROW_BLOCK rows of the innermost
        reduce axis, then in double, as a row pass adds). Row values are computed
        per lane, then the results stored; element outputs as each lane is done."""
        o, r, lanes = self.outer[0], self.red[-1], COLUMN_LANES
        reduces = self.layout.passes[0]
        args = [st.args[0] for st in reduces]
        parts = [st for st in reduces if self.float_partial(st)]
        self.line(1, "#pragma omp parallel for if(parallel: lz_work > LZ_PAR_MIN) "
                     "schedule(static)")
        self.line(1, f"for (int64_t c{o} = 0; c{o} < n{o}; c{o} += {lanes}) {{")
        d = 2
        self.line(d, f"const int64_t w{o} = n{o} - c{o} < {lanes} ? n{o} - c{o} : {lanes};")
        for st in reduces:
            acc_t, init, _ = self.accumulator(st)
            self.line(d, f"{acc_t} acc{st.id}[{lanes}];")
            self.line(d, f"for (int64_t j = 0; j < {lanes}; j++) acc{st.id}[j] = {init};")
        for a in self.red[:-1]:  # the outer reduce axes: rows in order
            self.line(d, f"for (int64_t i{a} = 0; i{a} < n{a}; i{a}++) {{")
            d += 1
        self.line(d, f"for (int64_t b{r} = 0; b{r} < n{r}; b{r} += {ROW_BLOCK}) {{")
        self.line(d + 1, f"const int64_t e{r} = b{r} + {ROW_BLOCK} < n{r} ? "
                         f"b{r} + {ROW_BLOCK} : n{r};")
        for st in parts:
            self.line(d + 1, f"float part{st.id}[{lanes}];")
            self.line(d + 1, f"for (int64_t j = 0; j < {lanes}; j++) part{st.id}[j] = 0;")
        self.line(d + 1, f"for (int64_t i{r} = b{r}; i{r} < e{r}; i{r}++) {{")
        done = set(self.row_done)
        targets = args + [out.value for _, out in elem_outs]
        self.hoist_along(d + 2, o, targets)
        self.line(d + 2, "#pragma omp simd")
        self.line(d + 2, f"for (int64_t j = 0; j < w{o}; j++) {{")
        inner = d + 3
        self.line(inner, f"const int64_t i{o} = c{o} + j;")
        sids = self.needed(targets)
        self.compute(sids, inner, False)  # row values: per lane here
        self.compute(sids, inner, True)
        self.row_done = done
        for st in reduces:
            self.accumulate(st, inner, f"part{st.id}[j]" if st in parts else f"acc{st.id}[j]")
        for k, out in elem_outs:
            self.store(k, out, inner)
        self.line(d + 2, "}")
        self.line(d + 1, "}")
        for st in parts:
            self.line(d + 1, f"for (int64_t j = 0; j < w{o}; j++) "
                             f"acc{st.id}[j] += (double)part{st.id}[j];")
        self.line(d, "}")
        for _ in self.red[:-1]:
            d -= 1
            self.line(d, "}")
        self.line(d, f"for (int64_t j = 0; j < w{o}; j++) {{")
        self.line(d + 1, f"const int64_t i{o} = c{o} + j;")
        for st in reduces:
            t = _COMPUTE_T[st.dtype]
            self.line(d + 1, f"const {t} r{st.id} = ({t})acc{st.id}[j];")
            self.row_done.add(st.id)
        self.compute(self.needed([out.value for _, out in row_outs]), d + 1, False)
        for k, out in row_outs:
            self.store(k, out, d + 1)
        self.line(d, "}")
        self.line(1, "}")

    def open_reduce_loops(self, depth, clauses, parallel, serial=False):
        red = self.red
        for k, a in enumerate(red):
            innermost = k == len(red) - 1
            clause = " ".join(clauses)
            if serial:
                pragma = None  # argmax/argmin: the first index wins, in order
            elif k == 0 and parallel:
                pragma = (f"#pragma omp parallel for{' simd' if innermost else ''} {clause} "
                          "if(parallel: lz_work > LZ_PAR_MIN)")
            elif innermost:
                pragma = f"#pragma omp simd {clause}"
            else:
                pragma = None
            if pragma:
                self.line(depth + k, pragma.replace("  ", " ").rstrip())
            self.line(depth + k, f"for (int64_t i{a} = 0; i{a} < n{a}; i{a}++) {{")

    def close_loops(self, depth, count):
        for k in reversed(range(count)):
            self.line(depth + k, "}")

    def reduction_pass(self, reduces, depth, cache=(), last=False):
        """One loop over the reduce axes accumulating ``reduces`` (and filling
        the row buffers of ``cache``); ``last``: no later pass follows."""
        args = [st.args[0] for st in reduces]
        sids = self.needed(args)
        self.compute(sids, depth, False)  # row values the loop reads, hoisted
        clauses, finals = [], []
        serial = any(combine_of(st) in _INDEX for st in reduces)
        for st in reduces:
            self.declare_accumulator(st, depth, clauses, finals)
        one_axis = len(self.red) == 1
        prefetch = self.prefetches(sids, last) if one_axis and self.outer else []
        if one_axis and not self.outer and not serial:
            self.split_full_pass(reduces, depth, sids, clauses)
        elif one_axis and self.outer and not serial and (
                prefetch or any(self.float_partial(st) for st in reduces)):
            self.blocked_row_pass(reduces, depth, sids, clauses, cache, prefetch)
        else:
            self.open_reduce_loops(depth, clauses, parallel=not self.outer and not serial,
                                   serial=serial)
            inner = depth + len(self.red)
            self.compute(sids, inner + 1, True)
            if serial:
                lin = "0"
                for a in self.red:
                    lin = f"({lin}) * n{a} + i{a}" if lin != "0" else f"i{a}"
                self.line(inner + 1, f"const int64_t lin = {lin};")
            for st in reduces:
                self.accumulate(st, inner + 1)
            for c in cache:
                self.line(inner + 1, f"t{c}[i{self.red[0]}] = v{c};")
            self.close_loops(depth, len(self.red))
        for text in finals:
            self.line(depth, text)
        for st in reduces:
            self.row_done.add(st.id)

    def split_full_pass(self, reduces, depth, sids, clauses):
        """A reduction to one value over one axis: each thread splits its chunk
        [lo, hi) into FULL_STREAMS equal parts read side by side in one simd
        loop, one accumulator per part, then the tail; OpenMP combines the
        threads' results."""
        a, k = self.red[0], FULL_STREAMS
        self.line(depth, f"#pragma omp parallel {' '.join(clauses)} "
                         "if(parallel: lz_work > LZ_PAR_MIN)")
        self.line(depth, "{")
        d = depth + 1
        self.line(d, "const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();")
        self.line(d, f"const int64_t lo = n{a} / nt * t + (t < n{a} % nt ? t : n{a} % nt);")
        self.line(d, f"const int64_t hi = lo + n{a} / nt + (t < n{a} % nt);")
        self.line(d, f"const int64_t q = (hi - lo) / {k};")
        inner = []
        for st in reduces:
            acc_t, init, op = self.accumulator(st)
            parts = [f"acc{st.id}_{j}" for j in range(k)]
            self.line(d, f"{acc_t} {', '.join(f'{x} = {init}' for x in parts)};")
            inner.append(f"reduction({op}:{','.join(parts)})")
            if self.tracks_nan(st):
                inner.append(f"reduction(|:nan{st.id})")
        self.line(d, f"#pragma omp simd {' '.join(inner)}")
        self.line(d, "for (int64_t j = 0; j < q; j++) {")
        for j in range(k):
            self.line(d + 1, "{")
            self.line(d + 2, f"const int64_t i{a} = lo + {f'{j} * q + ' if j else ''}j;")
            self.compute(sids, d + 2, True)
            for st in reduces:
                self.accumulate(st, d + 2, f"acc{st.id}_{j}")
            self.line(d + 1, "}")
        self.line(d, "}")
        self.line(d, f"for (int64_t i{a} = lo + {k} * q; i{a} < hi; i{a}++) {{")
        self.compute(sids, d + 1, True)
        for st in reduces:
            self.accumulate(st, d + 1, f"acc{st.id}_0")
        self.line(d, "}")
        for st in reduces:
            self.combine(st, d, [f"acc{st.id}_{j}" for j in range(k)])
        self.line(depth, "}")

    def combine(self, st, depth, parts):
        name, kind = f"acc{st.id}", combine_of(st)
        if kind in _EXTREMES:
            cmp = ">" if kind is Combine.MAX else "<"
            for x in parts:
                self.line(depth, f"{name} = {x} {cmp} {name} ? {x} : {name};")
            return
        op = _C_OPERATOR[kind]
        terms = [f"({x} {op} {y})" for x, y in zip(parts[::2], parts[1::2])]
        terms += parts[len(parts) & ~1:]  # an odd one out
        self.line(depth, f"{name} {op}= {f' {op} '.join(terms)};")

    def float_partial(self, st) -> bool:
        """A float32/float16/bfloat16 row sum: added in float per ROW_BLOCK, in double
        across blocks (no float -> double convert per element)."""
        small = (D.FLOAT32, D.FLOAT16, D.BFLOAT16)
        return (combine_of(st) is Combine.SUM and bool(self.outer) and st.dtype in small
                and self.s.body[st.args[0]].dtype in small)

    def prefetches(self, sids, last) -> list[int]:
        """Inputs whose next row to prefetch during this pass: the last pass of
        a row, when it is compute-bound (an exp), so the next row's first pass
        finds its row in cache. One outer axis, rows contiguous."""
        if not last or len(self.outer) != 1 or not any(
                self.elem[x] and is_costly(self.s.body[x]) for x in sids):
            return []
        o, r = self.outer[0], self.red[0]
        return [k for k, i in enumerate(self.s.inputs)
                if i.index.strides[r] == 1 and i.index.strides[o] != 0]

    def blocked_row_pass(self, reduces, depth, sids, clauses, cache, prefetch):
        """A row pass in blocks of ROW_BLOCK: float sums per block (see
        float_partial), and the next row's prefetch before each block (in its
        own loop: a prefetch inside the simd loop stops vectorization)."""
        o, r = self.outer[0], self.red[0]
        parts = [st for st in reduces if self.float_partial(st)]
        inner = [c for c in clauses if not any(c == f"reduction(+:acc{st.id})" for st in parts)]
        inner += [f"reduction(+:part{st.id})" for st in parts]
        self.line(depth, f"for (int64_t b{r} = 0; b{r} < n{r}; b{r} += {ROW_BLOCK}) {{")
        d = depth + 1
        self.line(d, f"const int64_t e{r} = b{r} + {ROW_BLOCK} < n{r} ? b{r} + {ROW_BLOCK} : n{r};")
        for k in prefetch:  # one prefetch per 64-byte line
            nxt = self.index(f"in{k}", self.s.inputs[k].index, {o: f"(i{o} + 1)", r: "p"})
            self.line(d, f"if (i{o} + 1 < n{o} && n{r} * (int64_t)sizeof(*in{k}) <= "
                         f"{PREFETCH_ROW_BYTES})")
            self.line(d + 1, f"for (int64_t p = b{r}; p < e{r}; p += 64 / (int64_t)sizeof(*in{k})) "
                             f"__builtin_prefetch(&in{k}[{nxt}], 0, 3);")
        for st in parts:
            self.line(d, f"float part{st.id} = 0;")
        self.line(d, f"#pragma omp simd {' '.join(inner)}".rstrip())
        self.line(d, f"for (int64_t i{r} = b{r}; i{r} < e{r}; i{r}++) {{")
        self.compute(sids, d + 1, True)
        for st in reduces:
            self.accumulate(st, d + 1, f"part{st.id}" if st in parts else None)
        for c in cache:
            self.line(d + 1, f"t{c}[i{r}] = v{c};")
        self.line(d, "}")
        for st in parts:
            self.line(d, f"acc{st.id} += (double)part{st.id};")
        self.line(depth, "}")

    def accumulator(self, st) -> tuple:
        """(C type, identity, OpenMP reduction operator) of a reduction's
        accumulator, of the op table's dtype ``st.acc``: float sums and products
        in double, integer ones in int64 held as uint64_t (wrapping like NumPy),
        max/min in the argument's type; it starts at the op table's identity."""
        arg_code = self.s.body[st.args[0]].dtype
        op = fold_op(st)
        kind = op.combine
        if kind in (Combine.SUM, Combine.PROD):
            if st.acc not in (D.FLOAT64, D.INT64):
                raise EmitError(f"the C emitter accumulates {kind.value} in float64 or int64, "
                                f"not {D.NAMES[st.acc]} (kernel {self.s.name})")
            acc_t = "double" if st.acc == D.FLOAT64 else "uint64_t"
        elif kind in _EXTREMES:
            acc_t = _COMPUTE_T[arg_code]
        elif kind in (Combine.ANY, Combine.ALL):
            acc_t = "int"
        else:
            raise EmitError(f"the C emitter has no reduction {kind.value!r}")
        return acc_t, identity_literal(op.identity(arg_code), arg_code), _OMP_REDUCTION[kind]

    def tracks_nan(self, st) -> bool:
        return combine_of(st) in _EXTREMES and _is_float(self.s.body[st.args[0]].dtype)

    def declare_accumulator(self, st, depth, clauses, finals):
        t = _COMPUTE_T[st.dtype]
        name = f"acc{st.id}"
        if combine_of(st) in _INDEX:
            acc_t = _COMPUTE_T[self.s.body[st.args[0]].dtype]
            self.line(depth, f"{acc_t} best{st.id} = 0; int64_t {name} = 0;")
            finals.append(f"const int64_t r{st.id} = {name};")
            return
        acc_t, init, op = self.accumulator(st)
        self.line(depth, f"{acc_t} {name} = {init};")
        clauses.append(f"reduction({op}:{name})")
        if self.tracks_nan(st):
            self.line(depth, f"int nan{st.id} = 0;")
            clauses.append(f"reduction(|:nan{st.id})")
            finals.append(f"const {t} r{st.id} = nan{st.id} ? ({t})NAN : ({t}){name};")
        elif combine_of(st) in (Combine.ANY, Combine.ALL):
            finals.append(f"const int r{st.id} = {name};")
        else:
            finals.append(f"const {t} r{st.id} = ({t}){name};")

    def accumulate(self, st, depth, name=None):
        """``name``: another accumulator of the same reduction (a stream's, or a
        float block's ``part``, which adds without a cast)."""
        x = self.var(st.args[0])
        name = name or f"acc{st.id}"
        kind = combine_of(st)
        is_f = _is_float(self.s.body[st.args[0]].dtype)
        cast = "" if name.startswith("part") else f"({'double' if is_f else 'uint64_t'})"
        if kind in (Combine.SUM, Combine.PROD):
            self.line(depth, f"{name} {_C_OPERATOR[kind]}= {cast}{x};")
        elif kind in _EXTREMES:
            cmp = ">" if kind is Combine.MAX else "<"
            self.line(depth, f"{name} = {x} {cmp} {name} ? {x} : {name};")
            if is_f:
                self.line(depth, f"nan{st.id} |= ({x} != {x});")
        elif kind in (Combine.ANY, Combine.ALL):
            self.line(depth, f"{name} {_C_OPERATOR[kind]}= ({x} != 0);")
        else:
            cmp = ">" if kind is Combine.ARGMAX else "<"
            nan_wins = f" || {x} != {x}" if is_f else ""
            keep_nan = f"best{st.id} == best{st.id} && " if is_f else ""
            self.line(depth, f"if (lin == 0 || ({keep_nan}({x} {cmp} best{st.id}{nan_wins}))) "
                             f"{{ best{st.id} = {x}; {name} = lin; }}")
