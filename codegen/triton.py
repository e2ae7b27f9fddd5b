"""KernelSpec -> Triton source (one ``@triton.jit`` function per kernel).

Pure: spec in, :class:`TritonKernel` out (source text plus what a launch
needs: the buffers behind the pointer arguments, the integer arguments, the
grid). No compiling, no I/O.

The generated function is::

    NAME(in0, ..., out0, ..., fa, <int args>, numel, row, BLOCK: tl.constexpr)

(``tiled`` kernels take ``BLOCK_M, BLOCK_N: tl.constexpr`` instead of ``BLOCK``.)

``fa`` is a float64 tensor of the runtime scalars; the int args are every
domain size and every stride/offset that is not 0 or 1 (0 and 1 are baked in,
as in the C emitter), so one compiled kernel serves every batch size.

Kernel kinds:

* ``pointwise``: one program per ``BLOCK`` of the flattened domain; each
  axis index comes from the flat index with ``//`` and ``%`` by the runtime
  sizes, then each IndexMap's strides give the addresses. Autotuned on
  ``numel``.
* ``tiled`` pointwise (chosen by :func:`tile_axes`: a transposed buffer
  feeding or leaving a pointwise op): one program per ``BLOCK_M x BLOCK_N``
  tile of two axes, the innermost one and the axis the transposed buffer
  walks contiguously, so both it and the other buffers load and store
  contiguous runs. The other axes come from the same flat program id.
  Autotuned on the two tiled sizes.
* ``persistent`` reduction: one program per outer point (row); the reduce
  axes are flattened into one ``tl.arange(0, BLOCK)`` with
  ``BLOCK >= row length``: the row is loaded once and stays in registers
  through every pass (softmax: max, sum of exp, store).
* ``looped`` reduction (rows longer than ``persistent_max``): the same
  passes, each a loop over ``BLOCK`` chunks of the row with per-lane running
  accumulators, combined after the loop. Autotuned on ``row``.
* ``scan`` (cumsum, cumprod): one program per row, a loop over ``BLOCK``
  chunks carrying the running total; ``scan_lanes`` where the scanned axis
  is strided in memory: ``BLOCK_N`` rows per program, scanned together in
  ``BLOCK_M x BLOCK_N`` tiles (:mod:`codegen.triton_scan`).

Pass structure as in :mod:`codegen.c`, from the layout both emitters read
(:mod:`codegen.layout`): a reduction whose argument uses another
reduction's result runs in a later pass over the row. The reduction kinds
are laid out by :mod:`codegen.triton_reduce`, the scans by
:mod:`codegen.triton_scan`.

NumPy semantics come from :mod:`lazyrt.kernels.triton_math` (``lzm``):
NaN-propagating max/min, floor division/modulo, half-to-even rounding;
float16 values live in float32 (the planner's casts round them after every
op); bool buffers are uint8 0/1 (loaded as ``!= 0``, computed as int1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from lazyrt import dtypes as D
from lazyrt.lowering.triton import _COMPUTE_T, expression, load_expr, store_value
from lazyrt.ops import Combine
from lazyrt.planner.kernel_ir import GatherCheck, KernelSpec, is_scan, statements_needed

from .layout import combine_of, kernel_layout
from .triton_reduce import ReductionEmitter
from .triton_scan import ScanEmitter, scan_kind

#: longest row a reduction keeps in registers (one program, one block)
PERSISTENT_MAX = 16384

HEADER = """\
import triton
import triton.language as tl
from lazyrt.kernels import triton_math as lzm
from lazyrt.kernels import triton_random as lzr
"""


@dataclass(frozen=True)
class TritonKernel:
    name: str
    source: str               # a module: imports, then the jitted function
    kind: str                 # "pointwise" | "tiled" | "persistent" | "looped" | "scan" |
    #                           "scan_lanes" | "matmul"
    buffers: tuple            # program buffer per pointer argument (inputs, then outputs)
    iargs: tuple              # int arguments after ``fa``, in order (numel and row last)
    scalar_params: tuple      # program scalar slot per ``fa`` entry
    numel: int                # pointwise: elements; reductions: rows (outer points)
    row: int                  # reduced elements per row (0 for pointwise)
    tile: tuple = ()          # tiled: sizes of the row axis, the column axis, the rest;
    #                           scan_lanes: the lanes' axis size, the other rows
    layout: object = field(default=None, compare=False, repr=False)  # the KernelLayout read
    #: a GatherCheck per ``gather`` statement, in body order: the kernel then takes
    #: ``flag`` (2 int64 per gather) after ``fa``; an index out of range sets
    #: ``flag[2g]`` and writes itself to ``flag[2g + 1]`` (then is clamped)
    gathers: tuple = ()

    def grid(self):
        """The launch grid, a function of the chosen config (autotuned BLOCK)."""
        if self.kind == "pointwise":
            n = self.numel
            return lambda meta: (triton_cdiv(n, meta["BLOCK"]),)
        if self.kind == "tiled":
            # one flat grid axis: CUDA caps the second and third at 65535
            rows, cols, rest = self.tile
            return lambda meta: (triton_cdiv(rows, meta["BLOCK_M"]) *
                                 triton_cdiv(cols, meta["BLOCK_N"]) * rest,)
        if self.kind == "scan_lanes":
            cols, rest = self.tile
            return lambda meta: (triton_cdiv(cols, meta["BLOCK_N"]) * rest,)
        rows = self.numel
        return (rows,)

    @property
    def persistent_block(self) -> int:
        return max(16, 1 << max(0, self.row - 1).bit_length())


def triton_cdiv(a, b):
    return (a + b - 1) // b


def scalar_loads(reads) -> list[str]:
    """The lines that load a kernel's runtime scalars ``s0, s1, ...`` from
    ``fa``, the program's scalar table, as ``reads`` (a KernelLayout's
    ``scalars``, see :func:`codegen.layout.scalar_reads`) say. Every Triton
    template loads its scalars through here.
    """
    lines = []
    for r in reads:
        word = f"tl.load(fa.to(tl.pointer_type(tl.int64)) + {r.slot})" if r.int_bits \
            else f"tl.load(fa + {r.slot})"
        lines.append(f"s{r.k} = ({word} != 0)" if r.dtype == D.BOOL
                     else f"s{r.k} = {word}.to({_COMPUTE_T[r.dtype]})")
    return lines


def tile_axes(spec: KernelSpec):
    """``(a, inner)``: the axes of a 2-D tiled pointwise kernel; None for the 1-D walk.

    The 1-D walk's lanes move along the innermost axis. A buffer whose stride
    there is not 0 or +-1 but which is contiguous (stride +-1) along another
    axis ``a`` is read (or written) a stride apart per lane: uncoalesced. When
    some other buffer is contiguous along the innermost axis, tiles over
    ``(a, innermost)`` give both of them contiguous runs. ``x.T + 1`` over
    domain (N, M): in0 strides (1, N), out0 strides (M, 1) -> ``(0, 1)``.

    Only which strides are 0 or +-1 decides (that is what the source bakes
    in), so every size, a batch of 1 included, reuses the same kernel.
    """
    if spec.reduce_axes or len(spec.domain) < 2:
        return None
    inner = len(spec.domain) - 1
    ios = spec.inputs + spec.outputs
    if not any(abs(io.index.strides[inner]) == 1 for io in ios):
        return None
    for io in ios:
        strides = io.index.strides
        if abs(strides[inner]) <= 1:
            continue
        for a in reversed(range(inner)):
            if abs(strides[a]) == 1:
                return a, inner
    return None


def emit_triton(spec: KernelSpec, persistent_max: int = PERSISTENT_MAX) -> TritonKernel:
    """Triton source for one kernel, and what launching it needs."""
    return _Emitter(spec, persistent_max).run()


class _Emitter(ReductionEmitter, ScanEmitter):
    def __init__(self, spec: KernelSpec, persistent_max: int):
        self.s = spec
        self.red = tuple(spec.reduce_axes)
        self.outer = spec.outer_axes
        self.row_len = math.prod(spec.domain[a] for a in self.red) if self.red else 0
        self.n_rows = math.prod(spec.domain[a] for a in self.outer)
        self.looped = bool(self.red) and self.row_len > persistent_max
        self.tile = tile_axes(spec)
        self.dims = None  # tiled: tile axes per statement, on first use
        self.params: list[str] = []
        self.iargs: list[int] = []
        self.out: list[str] = []
        self.layout = kernel_layout(spec)
        self.elem, self.stage = self.layout.elem, self.layout.stage
        self.row_done: set[int] = set()
        self.elem_done: set[int] = set()
        self.chunk_open = False
        # 64-bit index math only where some buffer spans 2**31 elements
        span = 0
        for io in spec.inputs + spec.outputs:
            ext = abs(io.index.offset) + sum(abs(st) * max(n - 1, 0)
                                             for st, n in zip(io.index.strides, spec.domain))
            span = max(span, ext, math.prod(spec.domain))
        self.idx64 = span >= 2**31 - 1

    # -- small pieces --
    def arg(self, name: str, value: int) -> str:
        self.params.append(name)
        self.iargs.append(int(value))
        return name

    def line(self, depth: int, text: str):
        self.out.append("    " * depth + text)

    def var(self, sid: int) -> str:
        return f"v{sid}" if self.elem[sid] else f"r{sid}"

    def stride_terms(self, prefix, imap, axes) -> list[str]:
        terms = []
        for a in axes:
            st = imap.strides[a]
            if st == 1:
                terms.append(f"i{a}")
            elif st != 0:
                terms.append(f"i{a} * {prefix}_s{a}")
        return terms

    def declare_io(self, prefix, io):
        if io.index.offset:
            self.arg(f"{prefix}_o", io.index.offset)
        for a, st in enumerate(io.index.strides):
            if st not in (0, 1):
                self.arg(f"{prefix}_s{a}", st)

    def decompose(self, depth, flat, axes):
        """Axis indices ``i{a}`` of ``axes`` (row-major) from the flat index ``flat``."""
        axes = list(axes)
        if len(axes) == 1:
            self.line(depth, f"i{axes[0]} = {flat}")
            return
        self.line(depth, f"rem = {flat}")
        for k, a in enumerate(reversed(axes)):
            if k == len(axes) - 1:
                self.line(depth, f"i{a} = rem")
            else:
                self.line(depth, f"i{a} = rem % n{a}")
                self.line(depth, f"rem = rem // n{a}")

    # -- statements --
    def compute(self, sids, depth, element: bool, mask):
        for sid in sids:
            st = self.s.body[sid]
            if self.elem[sid] != element:
                continue
            done = self.elem_done if element else self.row_done
            if sid in done:
                continue
            if st.op == "reduce" and self.red:
                continue
            if st.op == "gather":
                self.gather(st, depth, mask)
            else:
                self.line(depth, f"{self.var(sid)} = {self.stmt_expr(st, mask)}")
            done.add(sid)

    def value_mask(self, sid, mask):
        """The mask a load of value ``sid``'s shape takes (None for a scalar)."""
        if self.tile:
            return self.tile_mask(self.tile_dims(sid))
        return mask if self.is_vector(sid) else None

    def gather(self, st, depth, mask):
        """A fused gather: the loaded index flagged when out of range, wrapped,
        clamped, then the source read at it (lines, not one expression)."""
        k, _, _, negative = st.attr[:4]
        io, g, j = self.s.inputs[k], self.gather_no[st.id], f"j{st.id}"
        n = f"g{st.id}_n"
        self.line(depth, f"{j} = {self.var(st.args[0])}.to(tl.int64)")
        bad = f"(({j} < {'-' + n if negative else '0'}) | ({j} >= {n}))"
        lanes = self.value_mask(st.args[0], mask)
        if lanes:
            bad = f"{lanes} & {bad}"
        self.line(depth, f"tl.store(flag + {2 * g} + 0 * {j}, 1, mask={bad})  # raised by the "
                         "launch")
        self.line(depth, f"tl.store(flag + {2 * g + 1} + 0 * {j}, {j}, mask={bad})")
        if negative:
            self.line(depth, f"{j} = tl.where({j} < 0, {j} + {n}, {j})")
        self.line(depth, f"{j} = tl.minimum(tl.maximum({j}, 0), {n} - 1)  # never out of bounds")
        at = self.address(f"in{k}", io.index, self.elem[st.id])
        self.line(depth, f"{self.var(st.id)} = " + load_expr(
            f"in{k}", f"{at} + {j} * g{st.id}_s", io.dtype, self.value_mask(st.id, mask)))

    def stmt_expr(self, st, mask) -> str:
        if st.op == "load":
            io = self.s.inputs[st.attr]
            return load_expr(f"in{st.attr}", self.address(f"in{st.attr}", io.index,
                                                          self.elem[st.id]),
                             io.dtype, self.value_mask(st.id, mask))
        if st.op == "scalar":
            return f"s{st.attr}"
        if st.op == "reduce":  # over no axes
            a = self.var(st.args[0])
            kind = combine_of(st)
            if kind in (Combine.ANY, Combine.ALL):
                return f"({a} != 0)"
            if kind in (Combine.ARGMAX, Combine.ARGMIN):
                return f"(({a} != {a}) & ({a} == {a})).to(tl.int64)"  # 0, NaN or not
            return f"{a}.to({_COMPUTE_T[st.dtype]})"
        return expression(self.s, st, self.var)

    def address(self, prefix, imap, element) -> str:
        """Offset expression of ``imap`` at the current point."""
        if not self.red:
            terms = ([f"{prefix}_o"] if imap.offset else []) + \
                self.stride_terms(prefix, imap, range(len(self.s.domain)))
            return " + ".join(terms) or "0"
        base = f"{prefix}_rb"
        if not element:
            return base
        terms = [base] + self.stride_terms(prefix, imap, self.red)
        return " + ".join(terms)

    def needed(self, targets) -> list[int]:
        return statements_needed(self.s, targets, self.row_done)

    def store(self, k, out, depth, mask, element):
        v = self.var(out.value)
        if self.tile:
            idx = self.address(f"out{k}", out.index, True)
            # the pointer must span the whole tile, as the mask does
            idx += "".join(f" + i{a} * 0" for a in self.tile if out.index.strides[a] == 0)
            if self.tile_dims(out.value) != self.tile:
                v = f"tl.broadcast_to({v}, [BLOCK_M, BLOCK_N])"
            self.line(depth, f"tl.store(out{k} + {idx}, {store_value(v, out.dtype)}, mask={mask})")
            return
        if not self.red:
            idx = self.address(f"out{k}", out.index, True)
            if not any(out.index.strides):
                idx = f"{idx} + offs * 0"  # a 0-d domain: one lane stores
            if not self.elem_of_pointwise(out.value):
                v = f"tl.broadcast_to({v}, [BLOCK])"
            self.line(depth, f"tl.store(out{k} + {idx}, {store_value(v, out.dtype)}, mask={mask})")
            return
        idx = self.address(f"out{k}", out.index, element)
        if element:
            if not self.elem[out.value]:
                v = f"tl.broadcast_to({v}, [BLOCK])"
            if not any(out.index.strides[a] for a in self.red):
                # the value varies along the reduce axes, the address does not: a row
                # of one element (an unsqueezed 0-d value reduced beside the value
                # itself reads one input slot). The pointer spans the row, as the
                # mask does, and the one lane stores.
                idx += " + r * 0"
            self.line(depth, f"tl.store(out{k} + {idx}, {store_value(v, out.dtype)}, mask={mask})")
        else:
            self.line(depth, f"tl.store(out{k} + {idx}, {store_value(v, out.dtype)})")

    def is_vector(self, sid) -> bool:
        return self.elem[sid] if self.red else self.elem_of_pointwise(sid)

    def elem_of_pointwise(self, sid) -> bool:
        """In a pointwise kernel: is the value a [BLOCK] vector (not a scalar)?"""
        st = self.s.body[sid]
        if st.op in ("load", "gather"):  # a gather: its source's map or its index
            k = st.attr if st.op == "load" else st.attr[0]
            return any(s != 0 for s in self.s.inputs[k].index.strides) or \
                any(self.elem_of_pointwise(a) for a in st.args)
        if st.op in ("scalar", "const"):
            return False
        return any(self.elem_of_pointwise(a) for a in st.args)

    def tile_dims(self, sid) -> tuple:
        """In a tiled kernel: the tile axes the value varies along (its shape:
        ``(a, inner)`` a full tile, ``(a,)`` a column, ``(inner,)`` a row,
        ``()`` one scalar per program)."""
        if self.dims is None:
            self.dims = []
            for st in self.s.body:  # ids are positions, arguments come first
                varies = {a for arg in st.args for a in self.dims[arg]}
                if st.op in ("load", "gather"):
                    k = st.attr if st.op == "load" else st.attr[0]
                    strides = self.s.inputs[k].index.strides
                    varies |= {a for a in self.tile if strides[a] != 0}
                self.dims.append(tuple(a for a in self.tile if a in varies))
        return self.dims[sid]

    def tile_mask(self, dims):
        """The mask of a value shaped by ``dims`` (None for a scalar: it is
        indexed by the non-tiled axes only, always in range)."""
        if not dims:
            return None
        return "mask" if len(dims) == 2 else f"mask{dims[0]}"

    # -- structure --
    def run(self) -> TritonKernel:
        s = self.s
        nd = len(s.domain)
        for a in range(nd):
            self.arg(f"n{a}", s.domain[a])
        for k, io in enumerate(s.inputs):
            self.declare_io(f"in{k}", io)
        for k, io in enumerate(s.outputs):
            self.declare_io(f"out{k}", io)
        gathers = [st for st in s.body if st.op == "gather"]
        self.gather_no = {st.id: g for g, st in enumerate(gathers)}
        for st in gathers:
            self.arg(f"g{st.id}_s", st.attr[1])
            self.arg(f"g{st.id}_n", st.attr[2])
        kind = ("tiled" if self.tile else "pointwise") if not self.red else \
            scan_kind(s) if is_scan(s) else ("looped" if self.looped else "persistent")
        numel = math.prod(s.domain) if not self.red else self.n_rows
        self.arg("numel", numel)
        self.arg("row", self.row_len)
        body = []
        self.out = body
        for text in scalar_loads(self.layout.scalars):
            self.line(1, text)
        if kind.startswith("scan"):
            self.scan_body()
        elif self.tile:
            self.tiled_body(nd)
        elif not self.red:
            self.pointwise_body(nd)
        else:
            self.reduction_body()
        ptrs = [f"in{k}" for k in range(len(s.inputs))] + \
            [f"out{k}" for k in range(len(s.outputs))]
        blocks = ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr"] \
            if self.tile or kind == "scan_lanes" else ["BLOCK: tl.constexpr"]
        sig = ", ".join(ptrs + ["fa"] + (["flag"] if gathers else []) + self.params + blocks)
        head = [f"# {s.name}: {s.comment or 'fused kernel'}"]
        if kind == "pointwise":
            head.append("@triton.autotune(configs=lzm.POINTWISE_CONFIGS, key=['numel'])")
        elif kind == "tiled":
            a, inner = self.tile
            head.append(f"@triton.autotune(configs=lzm.TILE_CONFIGS, key=['n{a}', 'n{inner}'])")
        elif kind == "looped":
            head.append("@triton.autotune(configs=lzm.REDUCTION_CONFIGS, key=['row'])")
        head += ["@triton.jit", f"def {s.name}({sig}):"]
        source = HEADER + "\n\n" + "\n".join(head + body) + "\n"
        buffers = tuple(i.buffer for i in s.inputs) + tuple(o.buffer for o in s.outputs)
        tile = ()
        if self.tile:
            rows, cols = (s.domain[a] for a in self.tile)
            tile = (rows, cols, math.prod(n for a, n in enumerate(s.domain) if a not in self.tile))
        elif kind == "scan_lanes":
            cols = s.domain[-1]
            tile = (cols, self.n_rows // cols if cols else 0)
        checks = tuple(GatherCheck.of(s, st) for st in gathers)
        return TritonKernel(s.name, source, kind, buffers, tuple(self.iargs),
                            tuple(s.scalar_params), numel, self.row_len, tile, self.layout,
                            checks)

    def pointwise_body(self, nd):
        s = self.s
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        self.line(1, f"offs = {pid} * BLOCK + tl.arange(0, BLOCK)")
        self.line(1, "mask = offs < numel")
        if nd:
            self.decompose(1, "offs", range(nd))
        everything = self.needed([o.value for o in s.outputs])
        self.compute(everything, 1, False, "mask")
        for k, o in enumerate(s.outputs):
            self.store(k, o, 1, "mask", True)

    def tiled_body(self, nd):
        """One BLOCK_M x BLOCK_N tile of axes (a, inner) per program; the flat
        program id enumerates column tiles fastest, then row tiles, then the
        other axes (row-major)."""
        s = self.s
        a, inner = self.tile
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        self.line(1, f"# 2-D tiles over axes {a} x {inner}: a 1-D walk would be uncoalesced")
        self.line(1, f"pid = {pid}")
        self.line(1, f"tiles{inner} = tl.cdiv(n{inner}, BLOCK_N)")
        self.line(1, f"tiles{a} = tl.cdiv(n{a}, BLOCK_M)")
        self.line(1, f"i{inner} = (pid % tiles{inner}) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]")
        self.line(1, f"pid = pid // tiles{inner}")
        self.line(1, f"i{a} = (pid % tiles{a}) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]")
        rest = [b for b in range(nd) if b not in self.tile]
        if rest:
            self.line(1, f"pid = pid // tiles{a}")
            self.decompose(1, "pid", rest)
        self.line(1, f"mask{a} = i{a} < n{a}")
        self.line(1, f"mask{inner} = i{inner} < n{inner}")
        self.line(1, f"mask = mask{a} & mask{inner}")
        everything = self.needed([o.value for o in s.outputs])
        self.compute(everything, 1, False, "mask")
        for k, o in enumerate(s.outputs):
            self.store(k, o, 1, "mask", True)
