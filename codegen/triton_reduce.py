"""The reduction half of the Triton emitter: persistent and looped row reductions.

:class:`ReductionEmitter` is mixed into :class:`codegen.triton._Emitter`, which
owns the kernel's signature, addresses, expressions and stores (as
:mod:`codegen.c_reduce` is for the C emitter). One program per row (outer
point); the row is walked once per *pass* of the layout (:mod:`codegen.layout`):
``persistent`` keeps the whole row in one ``BLOCK`` of registers, ``looped``
walks it in ``BLOCK`` chunks. Each reduction keeps per-lane accumulators during
the walk and combines them after it: NaN-propagating max/min, first-index
argmax/argmin (a NaN wins), sums and products in the op table's accumulator.
"""
from __future__ import annotations

from lazyrt.lowering.triton import _COMPUTE_T, EmitError, _is_float, literal
from lazyrt.ops import Combine

from .layout import combine_of, fold_op

_EXTREMES = (Combine.MAX, Combine.MIN)
_INDEX = (Combine.ARGMAX, Combine.ARGMIN)


class ReductionEmitter:
    def reduction_body(self):
        s = self.s
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        self.line(1, f"pid = {pid}")
        if self.outer:
            self.decompose(1, "pid", self.outer)
        for k, io in enumerate(s.inputs):
            self.row_base(f"in{k}", io.index)
        for k, io in enumerate(s.outputs):
            self.row_base(f"out{k}", io.index)
        for reduces in self.layout.passes:
            self.reduction_pass(reduces)
        row_outs = [(k, s.outputs[k]) for k in self.layout.row_outputs]
        elem_outs = [(k, s.outputs[k]) for k in self.layout.elem_outputs]
        self.compute(self.needed([o.value for _, o in row_outs]), 1, False, None)
        for k, o in row_outs:
            self.store(k, o, 1, None, False)
        if elem_outs:
            sids = self.needed([o.value for _, o in elem_outs])
            self.compute(sids, 1, False, None)
            depth = self.open_chunk()
            self.compute(sids, depth, True, "rmask")
            for k, o in elem_outs:
                self.store(k, o, depth, "rmask", True)
            self.close_chunk()

    def row_base(self, prefix, imap):
        terms = ([f"{prefix}_o"] if imap.offset else []) + \
            self.stride_terms(prefix, imap, self.outer)
        self.line(1, f"{prefix}_rb = {' + '.join(terms) or '0'}")

    def open_chunk(self) -> int:
        """Start one walk over the row; returns the depth of its body."""
        depth = 1
        if not self.looped and self.chunk_open:
            return depth  # persistent: the whole row is already in registers
        self.chunk_open = True
        if self.looped:
            self.line(1, "for start in range(0, row, BLOCK):")
            depth = 2
            self.line(depth, "r = start + tl.arange(0, BLOCK)")
        else:
            self.line(depth, "r = tl.arange(0, BLOCK)")
        self.line(depth, "rmask = r < row")
        self.decompose(depth, "r", self.red)
        return depth

    def close_chunk(self):
        if self.looped:
            self.elem_done.clear()  # values of one chunk do not outlive the loop

    def reduction_pass(self, reduces):
        args = [st.args[0] for st in reduces]
        sids = self.needed(args)
        self.compute(sids, 1, False, None)
        for st in reduces:
            self.declare_accumulator(st)
        depth = self.open_chunk()
        self.compute(sids, depth, True, "rmask")
        for st in reduces:
            self.accumulate(st, depth)
        self.close_chunk()
        for st in reduces:
            self.finish(st)
            self.row_done.add(st.id)

    # -- reductions: per-lane accumulators, combined after the walk --
    def arg_info(self, st):
        code = self.s.body[st.args[0]].dtype
        return code, _COMPUTE_T[code]

    def declare_accumulator(self, st):
        code, t = self.arg_info(st)
        kind, acc = combine_of(st), f"acc{st.id}"
        if kind in (Combine.SUM, Combine.PROD):
            at = _COMPUTE_T[st.acc]  # the op table's accumulator (float64 for floats)
            self.line(1, f"{acc} = tl.full([BLOCK], {self.identity(st)}, {at})")
        elif kind in _EXTREMES:
            self.line(1, f"{acc} = tl.full([BLOCK], {self.identity(st)}, {t})")
            if _is_float(code):
                self.line(1, f"nan{st.id} = tl.zeros([BLOCK], tl.int32)")
        elif kind in (Combine.ANY, Combine.ALL):
            self.line(1, f"{acc} = tl.full([BLOCK], {self.identity(st)}, tl.int32)")
        elif kind in _INDEX:  # the best value so far starts at max's (min's) identity
            self.line(1, f"best{st.id} = tl.full([BLOCK], {self.identity(st)}, {t})")
            self.line(1, f"{acc} = tl.full([BLOCK], -1, tl.int64)")
        else:
            raise EmitError(f"the Triton emitter has no reduction {kind.value!r}")

    def identity(self, st) -> str:
        """The op table's identity of reduction ``st`` for its argument's dtype."""
        return literal(fold_op(st).identity(self.arg_info(st)[0]))

    def accumulate(self, st, depth):
        x = self.var(st.args[0])
        code, t = self.arg_info(st)
        kind, acc = combine_of(st), f"acc{st.id}"
        if not self.elem[st.args[0]]:
            x = f"tl.broadcast_to({x}, [BLOCK])"
        if kind in (Combine.SUM, Combine.PROD):
            op = "+" if kind is Combine.SUM else "*"
            self.line(depth, f"{acc} = {acc} {op} tl.where(rmask, {x}.to({acc}.dtype), "
                             f"{self.identity(st)})")
        elif kind in _EXTREMES:
            cmp = ">" if kind is Combine.MAX else "<"
            self.line(depth, f"{acc} = tl.where(rmask & ({x} {cmp} {acc}), {x}, {acc})")
            if _is_float(code):
                self.line(depth, f"nan{st.id} = nan{st.id} | (rmask & ({x} != {x})).to(tl.int32)")
        elif kind is Combine.ANY:
            self.line(depth, f"{acc} = {acc} | (rmask & ({x} != 0)).to(tl.int32)")
        elif kind is Combine.ALL:
            self.line(depth, f"{acc} = {acc} & ((rmask == 0) | ({x} != 0)).to(tl.int32)")
        else:
            cmp = ">" if kind is Combine.ARGMAX else "<"
            b = f"best{st.id}"
            # per lane: the first best value seen (chunks come in row order);
            # a NaN beats everything and is never replaced
            better = f"(({x} {cmp} {b}) | ({acc} < 0))"
            if _is_float(code):
                better = f"((({x} {cmp} {b}) | ({x} != {x}) | ({acc} < 0)) & ({b} == {b}))"
            self.line(depth, f"upd = rmask & {better}")
            self.line(depth, f"{b} = tl.where(upd, {x}, {b})")
            self.line(depth, f"{acc} = tl.where(upd, r.to(tl.int64), {acc})")

    def finish(self, st):
        code, t = self.arg_info(st)
        kind, acc = combine_of(st), f"acc{st.id}"
        out_t = _COMPUTE_T[st.dtype]
        r = f"r{st.id}"
        if kind is Combine.SUM:
            self.line(1, f"{r} = tl.sum({acc}, axis=0).to({out_t})")
        elif kind is Combine.PROD:
            self.line(1, f"{r} = tl.reduce({acc}, 0, lzm.mul_combine).to({out_t})")
        elif kind in _EXTREMES:
            fn = "max" if kind is Combine.MAX else "min"
            self.line(1, f"{r} = tl.{fn}({acc}, axis=0).to({out_t})")
            if _is_float(code):
                self.line(1, f"{r} = tl.where(tl.max(nan{st.id}, axis=0) > 0, "
                             f"float(\"nan\"), {r}).to({out_t})")
        elif kind is Combine.ANY:
            self.line(1, f"{r} = tl.max({acc}, axis=0) != 0")
        elif kind is Combine.ALL:
            self.line(1, f"{r} = tl.min({acc}, axis=0) != 0")
        elif kind in _INDEX:
            b = f"best{st.id}"
            big = str(2**62)
            if _is_float(code):
                self.line(1, f"nan_at = tl.min(tl.where(({b} != {b}) & ({acc} >= 0), {acc}, "
                             f"{big}), axis=0)")
            fn = "max" if kind is Combine.ARGMAX else "min"
            self.line(1, f"top = tl.{fn}(tl.where({acc} >= 0, {b}, "
                         f"{self.identity(st)}), axis=0)")
            self.line(1, f"{r} = tl.min(tl.where(({acc} >= 0) & ({b} == top), {acc}, {big}), "
                         f"axis=0)")
            self.line(1, f"{r} = tl.where({r} == {big}, 0, {r})")
            if _is_float(code):
                self.line(1, f"{r} = tl.where(nan_at < {big}, nan_at, {r})")
