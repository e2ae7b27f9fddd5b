"""The scan half of the Triton emitter: a running sum or product along one axis.

:class:`ScanEmitter` is mixed into :class:`codegen.triton._Emitter`, which
owns the kernel's signature, addresses, expressions and stores; it lays out
a *scan kernel* (:func:`lazyrt.planner.kernel_ir.is_scan`), kind ``"scan"``:
one program per row (outer point), walking the row in blocks of ``BLOCK``
elements. Each block's values (pointwise producers fused) are scanned with
``tl.cumsum`` / ``tl.cumprod`` in the op table's accumulator (float64 for
floats, int64 for ints) and combined with a running total carried from the
blocks before, so a row of any length is one program. ``BLOCK`` is the row
rounded up to a power of two, at most :data:`SCAN_BLOCK` (the launch passes
it: :func:`scan_block`).

Within a block the scan adds in a tree, not in order: float64 sums of
float32 data round to the same float32 as NumPy's in-order float64 sum
except in rare ties; float64 data may differ from NumPy in the last bits.

A scan along an axis that memory walks with a stride (``cumsum(x, axis=0)``
of a row-major matrix: the last domain axis, an outer one, is the
contiguous one) is kind ``"scan_lanes"``: one program per ``BLOCK_N``
neighbouring rows of the last axis (and per point of the other outer axes),
each block a ``[BLOCK_M, BLOCK_N]`` tile scanned along its first dimension,
so every load and store is a contiguous run of ``BLOCK_N`` elements.

Under include_initial the identity is stored at element -1 of the axis
first (the output's index map is offset one element along it).
"""
from __future__ import annotations

from lazyrt.lowering.triton import _COMPUTE_T, EmitError, literal, store_value
from lazyrt.ops import Combine

from .layout import combine_of, fold_op, scan_initial_outputs

#: most elements of a row one program scans at once
SCAN_BLOCK = 1024



#: the ``scan_lanes`` tile: elements along the scanned axis x neighbouring rows
LANES_TILE = {"BLOCK_M": 32, "BLOCK_N": 64}


def scan_block(row: int) -> int:
    """``BLOCK`` of a scan kernel over rows of ``row`` elements."""
    return min(SCAN_BLOCK, max(16, 1 << max(0, row - 1).bit_length()))


def scan_kind(spec) -> str:
    """``"scan_lanes"`` where no buffer walks the scanned axis contiguously and
    one walks the last domain axis (an outer one) contiguously; else ``"scan"``.
    Only which strides are +-1 decides, so every size reuses one kernel."""
    (r,) = spec.reduce_axes
    last = len(spec.domain) - 1
    ios = spec.inputs + spec.outputs
    if r == last or any(abs(io.index.strides[r]) == 1 for io in ios):
        return "scan"
    return "scan_lanes" if any(abs(io.index.strides[last]) == 1 for io in ios) else "scan"


class ScanEmitter:
    """Scan kernels; expects the attributes and helpers of ``_Emitter``."""

    def scan_body(self):
        s = self.s
        if len(self.red) != 1:
            raise EmitError(f"kernel {s.name}: a scan runs along one axis, not {list(self.red)}")
        (r,) = self.red
        scans = [st for st in s.body if st.op == "scan"]
        for st in scans:
            if combine_of(st) not in (Combine.SUM, Combine.PROD):
                raise EmitError(f"the Triton emitter has no scan {combine_of(st).value!r} "
                                f"(kernel {s.name})")
        lanes = scan_kind(s) == "scan_lanes"
        last = len(s.domain) - 1
        self.elem = self.scan_element_level((r, last) if lanes else (r,))
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        if lanes:
            self.line(1, f"# scan along axis {r}: BLOCK_N rows of axis {last} per program, "
                         "a BLOCK_M x BLOCK_N tile at a time")
            self.line(1, f"pid = {pid}")
            self.line(1, f"tiles{last} = tl.cdiv(n{last}, BLOCK_N)")
            self.line(1, f"i{last} = (pid % tiles{last}) * BLOCK_N + "
                         "tl.arange(0, BLOCK_N)[None, :]")
            self.line(1, f"lmask = i{last} < n{last}")
            rest = [a for a in self.outer if a != last]
            if rest:
                self.line(1, f"pid = pid // tiles{last}")
                self.decompose(1, "pid", rest)
            shape, block, keep = "[1, BLOCK_N]", "BLOCK_M", ", keep_dims=True"
        else:
            self.line(1, f"# scan along axis {r}: one program per row, BLOCK elements at a time")
            self.line(1, f"pid = {pid}")
            if self.outer:
                self.decompose(1, "pid", self.outer)
            shape, block, keep = "[BLOCK]", "BLOCK", ""
        self.scan_shape = (shape, keep)
        for k, io in enumerate(s.inputs):
            self.row_base(f"in{k}", io.index)
        for k, io in enumerate(s.outputs):
            self.row_base(f"out{k}", io.index)
        targets = [o.value for o in s.outputs]
        self.compute(self.needed(targets), 1, False, None)
        for st in scans:  # the accumulator's dtype: a scalar, or a [1, BLOCK_N] row of lanes
            at = _COMPUTE_T[st.dtype]
            carry = f"tl.zeros({shape}, {at})" if lanes else \
                f"tl.sum(tl.zeros([BLOCK], {at}), axis=0)"
            self.line(1, f"carry{st.id} = {carry} + {self.scan_identity(st)}")
        for k, o, ident in scan_initial_outputs(self.s):
            st = o.index.strides[r]
            back = "" if st == 0 else (" - 1" if st == 1 else f" - out{k}_s{r}")
            init = "tl.zeros([1, BLOCK_N], tl.int64)" if lanes else \
                "tl.sum(tl.zeros([BLOCK], tl.int64), axis=0)"
            self.line(1, f"init{k} = {init} + {literal(ident)}")
            self.line(1, f"tl.store(out{k} + out{k}_rb{back}, {store_value(f'init{k}', o.dtype)}"
                         + (", mask=lmask)" if lanes else ")"))
        self.line(1, f"for start in range(0, row, {block}):")
        if lanes:
            self.line(2, "r = start + tl.arange(0, BLOCK_M)[:, None]")
            self.line(2, "rmask = (r < row) & lmask")
        else:
            self.line(2, "r = start + tl.arange(0, BLOCK)")
            self.line(2, "rmask = r < row")
        self.line(2, f"i{r} = r")
        self.compute(self.needed([st.args[0] for st in scans]), 2, True, "rmask")
        for st in scans:
            self.scan_block_of(st, 2)
        self.compute(self.needed(targets), 2, True, "rmask")
        for k, o in enumerate(s.outputs):
            self.store(k, o, 2, "rmask", True)
        self.elem_done.clear()

    def scan_element_level(self, axes) -> tuple:
        """Per statement: whether it varies along ``axes``, the axes a program's
        block spans (the scanned one, and the lanes' axis); a scan does."""
        elem = []
        for st in self.s.body:
            if st.op == "load":
                strides = self.s.inputs[st.attr].index.strides
                elem.append(any(strides[a] != 0 for a in axes))
            elif st.op in ("scalar", "const"):
                elem.append(False)
            else:
                elem.append(st.op == "scan" or any(elem[a] for a in st.args))
        return tuple(elem)

    def scan_identity(self, st) -> str:
        """The op table's identity of scan ``st`` for its argument's dtype."""
        return literal(fold_op(st).identity(self.s.body[st.args[0]].dtype))

    def scan_block_of(self, st, depth):
        """The scan of one block, plus the carry in; the carry out."""
        kind, at = combine_of(st), _COMPUTE_T[st.dtype]
        ident = self.scan_identity(st)
        shape, keep = self.scan_shape
        x = self.var(st.args[0])
        if not self.elem[st.args[0]]:
            x = f"tl.broadcast_to({x}, {shape})"
        xs, c = f"x{st.id}", f"carry{st.id}"
        self.line(depth, f"{xs} = tl.where(rmask, {x}.to({at}), {ident})")
        if kind is Combine.SUM:
            self.line(depth, f"v{st.id} = tl.cumsum({xs}, axis=0) + {c}")
            self.line(depth, f"{c} = {c} + tl.sum({xs}, axis=0{keep})")
        else:
            self.line(depth, f"v{st.id} = tl.cumprod({xs}, axis=0) * {c}")
            self.line(depth, f"{c} = {c} * tl.reduce({xs}, 0, lzm.mul_combine{keep})")
        self.elem_done.add(st.id)
