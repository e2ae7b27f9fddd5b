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

Under include_initial the identity is stored at element -1 of the axis
first (the output's index map is offset one element along it).
"""
from __future__ import annotations

from lazyrt.planner.kernel_ir import statements_needed

from .triton_lower import _COMPUTE_T, EmitError, store_value

#: most elements of a row one program scans at once
SCAN_BLOCK = 1024

_IDENTITY = {"sum": 0, "prod": 1}


def scan_block(row: int) -> int:
    """``BLOCK`` of a scan kernel over rows of ``row`` elements."""
    return min(SCAN_BLOCK, max(16, 1 << max(0, row - 1).bit_length()))


class ScanEmitter:
    """Scan kernels; expects the attributes and helpers of ``_Emitter``."""

    def scan_body(self):
        s = self.s
        if len(self.red) != 1:
            raise EmitError(f"kernel {s.name}: a scan runs along one axis, not {list(self.red)}")
        (r,) = self.red
        scans = [st for st in s.body if st.op == "scan"]
        for st in scans:
            if st.attr[0].combine not in _IDENTITY:
                raise EmitError(f"the Triton emitter has no scan {st.attr[0].combine!r} "
                                f"(kernel {s.name})")
        self.elem = self.scan_element_level(r)
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        self.line(1, f"# scan along axis {r}: one program per row, BLOCK elements at a time")
        self.line(1, f"pid = {pid}")
        if self.outer:
            self.decompose(1, "pid", self.outer)
        for k, io in enumerate(s.inputs):
            self.row_base(f"in{k}", io.index)
        for k, io in enumerate(s.outputs):
            self.row_base(f"out{k}", io.index)
        targets = [o.value for o in s.outputs]
        self.compute(self.needed(targets), 1, False, None)
        for st in scans:  # a scalar of the accumulator's dtype
            at = _COMPUTE_T[st.dtype]
            self.line(1, f"carry{st.id} = tl.sum(tl.zeros([BLOCK], {at}), axis=0) + "
                         f"{_IDENTITY[st.attr[0].combine]}")
        for k, o, ident in self.scan_initial_outputs():
            st = o.index.strides[r]
            back = "" if st == 0 else (" - 1" if st == 1 else f" - out{k}_s{r}")
            self.line(1, f"init{k} = tl.sum(tl.zeros([BLOCK], tl.int64), axis=0) + {ident}")
            self.line(1, f"tl.store(out{k} + out{k}_rb{back}, {store_value(f'init{k}', o.dtype)})")
        self.line(1, "for start in range(0, row, BLOCK):")
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

    def scan_element_level(self, r) -> tuple:
        """Per statement: whether it varies along the scanned axis (a scan does)."""
        elem = []
        for st in self.s.body:
            if st.op == "load":
                elem.append(self.s.inputs[st.attr].index.strides[r] != 0)
            elif st.op in ("scalar", "const"):
                elem.append(False)
            else:
                elem.append(st.op == "scan" or any(elem[a] for a in st.args))
        return tuple(elem)

    def scan_initial_outputs(self) -> list:
        """(k, output, identity) for each output that stores a scan's value under
        include_initial: it gets the identity at element -1 first."""
        out = []
        for k, o in enumerate(self.s.outputs):
            for sid in statements_needed(self.s, [o.value]):
                st = self.s.body[sid]
                if st.op == "scan" and st.attr[1]:
                    out.append((k, o, _IDENTITY[st.attr[0].combine]))
                    break
        return out

    def scan_block_of(self, st, depth):
        """The scan of one block, plus the carry in; the carry out."""
        kind, at = st.attr[0].combine, _COMPUTE_T[st.dtype]
        ident = _IDENTITY[kind]
        x = self.var(st.args[0])
        if not self.elem[st.args[0]]:
            x = f"tl.broadcast_to({x}, [BLOCK])"
        xs, c = f"x{st.id}", f"carry{st.id}"
        self.line(depth, f"{xs} = tl.where(rmask, {x}.to({at}), {ident})")
        if kind == "sum":
            self.line(depth, f"v{st.id} = tl.cumsum({xs}, axis=0) + {c}")
            self.line(depth, f"{c} = {c} + tl.sum({xs}, axis=0)")
        else:
            self.line(depth, f"v{st.id} = tl.cumprod({xs}, axis=0) * {c}")
            self.line(depth, f"{c} = {c} * tl.reduce({xs}, 0, lzm.mul_combine)")
        self.elem_done.add(st.id)
