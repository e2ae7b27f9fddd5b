"""The scan half of the C emitter: a running sum or product along one axis.

:class:`ScanEmitter` is mixed into :class:`codegen.c._Emitter`, which owns
the kernel's structure, expressions and stores; it lays out a *scan kernel*
(:func:`lazyrt.planner.kernel_ir.is_scan`): the domain's one reduce axis is
scanned, not reduced. Each element's value (pointwise producers fused) is
added to a running accumulator in the op table's dtype (double for floats,
int64 wrapping through uint64 for ints), and every element of the row is
stored. Rows run in parallel (OpenMP); a row's elements run in order, as
NumPy's ``cumsum`` adds them, so float64 sums match it bit for bit.

Two loop shapes:

* *row* (the scanned axis is the innermost domain axis): one row per
  iteration of the parallel loop, the scan loop inside;
* *lanes* (an outer axis lies inside the scanned one: ``cumsum(x, axis=0)``
  of a row-major matrix): blocks of ``SCAN_LANES`` neighbouring rows scan
  together, one accumulator per lane, so the innermost loop walks memory
  contiguously and vectorizes.

Under include_initial the identity is stored at element -1 of the axis
first (the output's index map is offset one element along it), so a row of
length 0 still gets its one element.
"""
from __future__ import annotations

from lazyrt.lowering.c import (_COMPUTE_T, EmitError, _fmt_const, _is_float,
                               identity_literal, store_value)
from lazyrt.ops import Combine

from .layout import combine_of, fold_op, scan_initial_outputs

#: the C operator of each combine a scan folds by
_SCAN_OPERATOR = {Combine.SUM: "+", Combine.PROD: "*"}

#: rows scanned together by the lanes loop shape (one accumulator each)
SCAN_LANES = 64



class ScanEmitter:
    """Scan kernels; expects the attributes and helpers of ``_Emitter``."""

    def scan_body(self):
        s = self.s
        if len(self.red) != 1:
            raise EmitError(f"kernel {s.name}: a scan runs along one axis, not {list(self.red)}")
        scans = [st for st in s.body if st.op == "scan"]
        for st in scans:
            if combine_of(st) not in _SCAN_OPERATOR:
                raise EmitError(f"the C emitter has no scan {combine_of(st).value!r} "
                                f"(kernel {s.name})")
        # every value is computed per element: GCC hoists what does not vary along the axis
        self.elem = tuple(True for _ in s.body)
        (r,) = self.red
        last = len(s.domain) - 1
        if r != last:
            self.scan_lanes(r, last, scans, SCAN_LANES)
        else:
            # rows one at a time: interleaving 8 rows of a 2048 x 2048 float32
            # matrix (8 KB apart: the same cache sets) took 13 ms, not 3.8 ms
            self.scan_rows(r, scans)

    # -- pieces --
    def scan_open_outer(self, axes, steps=None) -> int:
        """The parallel loops over ``axes`` (``steps``: axis -> block size);
        returns the depth of their body."""
        steps = steps or {}
        if not axes:
            self.line(1, "{")
            return 2
        collapse = f" collapse({len(axes)})" if len(axes) > 1 else ""
        self.line(1, f"#pragma omp parallel for{collapse} if(parallel: lz_work > LZ_PAR_MIN) "
                     "schedule(static)")
        for d, a in enumerate(axes):
            var = f"b{a}" if a in steps else f"i{a}"
            step = f"{var} += {steps[a]}" if a in steps else f"{var}++"
            self.line(1 + d, f"for (int64_t {var} = 0; {var} < n{a}; {step}) {{")
        return 1 + len(axes)

    def scan_close_outer(self, axes):
        for d in reversed(range(max(len(axes), 1))):
            self.line(1 + d, "}")

    def scan_start(self, st) -> str:
        """A scan's accumulator's first value: the op table's identity, as a C
        constant of the accumulator's dtype."""
        return _fmt_const(fold_op(st).identity(self.s.body[st.args[0]].dtype), st.dtype)

    def scan_accumulate(self, st, depth, acc):
        """``acc`` combined with the scan's argument, then the scan's value."""
        t = _COMPUTE_T[st.dtype]
        x = f"({t}){self.var(st.args[0])}"
        op = _SCAN_OPERATOR[combine_of(st)]
        if _is_float(st.dtype):
            self.line(depth, f"{acc} = {acc} {op} {x};")
        else:  # wrapping, as NumPy's integer scans (signed overflow is undefined in C)
            self.line(depth, f"{acc} = ({t})((uint64_t){acc} {op} (uint64_t){x});")
        self.line(depth, f"const {t} v{st.id} = {acc};")

    def scan_element(self, depth, acc_of):
        """One element: its values in program order, the scans, the stores."""
        for sid in self.needed([o.value for o in self.s.outputs]):
            st = self.s.body[sid]
            if st.op == "scan":
                self.scan_accumulate(st, depth, acc_of(st))
            else:
                self.line(depth, f"const {_COMPUTE_T[st.dtype]} v{sid} = {self.expr(sid)};")
        for k, o in enumerate(self.s.outputs):
            self.store(k, o, depth)

    # -- loop shapes --
    def scan_rows(self, r, scans):
        """One row per parallel iteration, scanned in order."""
        outer = list(self.outer)
        self.line(1, f"/* scan along axis {r}: one row per iteration, in order */")
        depth = self.scan_open_outer(outer)
        for st in scans:
            t = _COMPUTE_T[st.dtype]
            self.line(depth, f"{t} a{st.id} = {self.scan_start(st)};")
        for k, o, ident in scan_initial_outputs(self.s):
            at = self.index(f"out{k}", o.index, {r: "(-1)"})
            self.line(depth, f"out{k}[{at}] = "
                             f"{store_value(o.dtype, identity_literal(ident, o.dtype))};")
        self.line(depth, f"for (int64_t i{r} = 0; i{r} < n{r}; i{r}++) {{")
        self.scan_element(depth + 1, lambda st: f"a{st.id}")
        self.line(depth, "}")
        self.scan_close_outer(outer)

    def scan_lanes(self, r, last, scans, lanes):
        """Blocks of ``lanes`` rows along outer axis ``last`` scan together, one
        accumulator each: the innermost loop runs over the lanes (contiguous in
        memory when ``last`` is the innermost domain axis)."""
        outer = [a for a in self.outer if a != last] + [last]
        self.line(1, f"/* scan along axis {r}: {lanes} rows of axis {last} at a time, "
                     "one accumulator per lane */")
        depth = self.scan_open_outer(outer, {last: lanes})
        self.line(depth, f"const int64_t e{last} = b{last} + {lanes} < n{last} ? "
                         f"b{last} + {lanes} : n{last};")
        for st in scans:
            t = _COMPUTE_T[st.dtype]
            self.line(depth, f"{t} a{st.id}[{lanes}];")
            self.line(depth, f"for (int64_t j = 0; j < {lanes}; j++) "
                             f"a{st.id}[j] = {self.scan_start(st)};")
        loop = f"for (int64_t i{last} = b{last}; i{last} < e{last}; i{last}++)"
        for k, o, ident in scan_initial_outputs(self.s):
            at = self.index(f"out{k}", o.index, {r: "(-1)"})
            self.line(depth, f"{loop} out{k}[{at}] = "
                             f"{store_value(o.dtype, identity_literal(ident, o.dtype))};")
        self.line(depth, f"for (int64_t i{r} = 0; i{r} < n{r}; i{r}++) {{")
        self.line(depth + 1, "#pragma omp simd")
        self.line(depth + 1, f"{loop} {{")
        self.scan_element(depth + 2, lambda st: f"a{st.id}[i{last} - b{last}]")
        self.line(depth + 1, "}")
        self.line(depth, "}")
        self.scan_close_outer(outer)
