"""KernelSpec -> C11 source that GCC auto-vectorizes (OpenMP for threads).

Pure: spec in, :class:`CKernel` out (source text plus the integer arguments
the source reads at run time). No compiling, no I/O.

The generated function is::

    void NAME(char *const *bufs, const int64_t *ia, const double *fa)

``bufs`` holds the data pointers of the kernel's inputs then outputs, ``ia``
the domain sizes and every stride/offset that is not 0 or 1, ``fa`` the
runtime scalars. Strides of 0 and 1 are baked (they decide vectorization);
all other sizes are arguments, so one binary serves every batch size.

Loop shape: outer axes are parallel (``omp parallel for collapse``); the
kernel's reduce axes run inside, once per *pass*: a reduction whose argument
needs another reduction's result runs in a later pass over the row (softmax:
max, then sum of exp, then the normalized store); those passes are emitted
by :mod:`codegen.c_reduce`, from the layout both emitters read
(:mod:`codegen.layout`). A scan kernel (cumsum) is laid out by
:mod:`codegen.c_scan`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lazyrt import dtypes as D
from lazyrt.lowering import ComputeType, lower_statement
from lazyrt.lowering.c import (_COMPUTE_T, _STORE_T, _fmt_const, load_value,
                               store_value)
from lazyrt.ops import Combine
from lazyrt.planner.kernel_ir import KernelSpec, is_scan, statements_needed

from .c_reduce import ReductionEmitter, is_costly
from .c_scan import ScanEmitter
from .layout import combine_of, kernel_layout, varies_along


#: a transposing kernel's tiles (:meth:`_Emitter.tiled_pointwise_body`), elements
#: (along the last axis, across it): 16 x 16 uses whole every line it brings; where a
#: strided array's stride is a multiple of 4 KB (transposes of power-of-two shapes)
#: its 16 lines would share one 8-way L1 set, so 8 x 128 (each line used across 128
#: rows). Tiled are kernels with as many strided arrays as contiguous ones (a
#: transpose) whose strides span a line; others only where a stride aliases so, as
#: tiles cut contiguous rows into pieces the prefetcher does not follow (attention's
#: mask kernel, (3, 64, 4096), one array striding 256 B among three contiguous: 0.43
#: -> 0.61 ms in tiles); neither where an axis of the tile is under 16 elements.
#: Measured (Zen 3, 2 threads, float32, a sync included), transposes of: (64, 4096)
#: 500-556 -> 93-111 us (64 x 32 tiles: 492; 16 x 16: 205), (1024, 1024) 3240-3280
#: -> 476-499 us, (1000, 1000) 458-553 -> 249-317 us, (2048, 128) 270-301 -> 81-106 us.
TILES = ((16, 16), (8, 128))

_PRELUDE = """\
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <omp.h>
#include "lazyrt_math.h"
#include "lazyrt_random.h"
/* float16 values are computed in float and rounded after every op, as NumPy does */
static inline float lz_h(float x) { return (float)(_Float16)x; }
/* double to float16 in one rounding (through float it would round twice) */
static inline float lz_hd(double x) { return (float)(_Float16)x; }
static inline int64_t lz_ipow(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    uint64_t r = 1, x = (uint64_t)a;
    while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }
    return (int64_t)r;
}
/* a gathered index: from the end when negative (if allowed), clamped into [0, n) */
static inline int64_t lz_gidx(int64_t i, int64_t n, int negative) {
    if (negative && i < 0) i += n;
    return i < 0 ? 0 : (i >= n ? n - 1 : i);
}
"""


@dataclass(frozen=True)
class CKernel:
    name: str
    source: str
    iargs: tuple              # int64 runtime arguments, in ``ia`` order
    buffers: tuple            # program buffer per pointer in ``bufs``
    scalar_params: tuple      # program scalar slot per ``fa`` entry
    symbol: str = ""          # the C function's name
    layout: object = field(default=None, compare=False, repr=False)  # the KernelLayout read


def _symbol(spec: KernelSpec) -> str:
    """The C function name: the kernel's label plus a hash of its structure,
    not its position in the plan, so equal kernels share one binary."""
    import hashlib
    label = spec.name.split("_", 1)[-1] if spec.name.startswith("k") else spec.name
    shape = repr((len(spec.domain), spec.reduce_axes,
                  [(i.dtype, i.index.offset != 0, tuple(st if st in (0, 1) else 2
                                                        for st in i.index.strides))
                   for i in spec.inputs + spec.outputs],
                  spec.scalars, [(str(b.op), b.dtype, b.args, repr(_shape_free(b)), b.acc)
                                 for b in spec.body]))
    return f"{label[:60]}_{hashlib.sha1(shape.encode()).hexdigest()[:10]}"


def _shape_free(st):
    """A statement's attr without what the source reads at run time (a gather's
    stride, size and shapes), so kernels that differ only there share a binary."""
    return (st.attr[0], st.attr[3]) if st.op == "gather" else st.attr


#: extra work of a costly op per element, in memory-bound elements (see
#: :meth:`_Emitter.work_per_element`)
COSTLY_WORK = 8


def emit_c(spec: KernelSpec, aliased: frozenset = frozenset()) -> CKernel:
    """C source for one kernel, and the runtime integers it reads. ``aliased``
    names the pointers (``in0``, ``out1``...) that may be one array at run time
    (an output written over a donated input, element by element): they are
    declared without ``restrict``."""
    return _Emitter(spec, aliased).run()


class _Emitter(ReductionEmitter, ScanEmitter):
    def __init__(self, spec: KernelSpec, aliased: frozenset = frozenset()):
        self.s = spec
        self.aliased = aliased
        self.iargs: list[int] = []
        self.out: list[str] = []
        self.red = tuple(spec.reduce_axes)
        self.outer = spec.outer_axes
        self.layout = kernel_layout(spec)
        self.elem, self.stage = self.layout.elem, self.layout.stage
        self.row_done: set[int] = set()
        self.cached: list[int] = []
        self.gathers: dict[int, tuple] = {}  # gather statement -> its (stride, size) args
        #: index statement -> the gathers it indexes; a gather whose index was
        #: computed outside the element (a row's token id) reads from a row base
        #: (``g{id}``) computed with it (see :meth:`gather_bases`)
        self.indexes: dict[int, list] = {}
        for st in spec.body:
            if st.op == "gather":
                self.indexes.setdefault(st.args[0], []).append(st.id)
        self.based: set[int] = set()

    # -- small pieces --
    def arg(self, value: int) -> str:
        self.iargs.append(int(value))
        return f"ia[{len(self.iargs) - 1}]"

    def line(self, depth: int, text: str):
        self.out.append("    " * depth + text)

    def var(self, sid: int) -> str:
        return f"v{sid}" if self.elem[sid] else f"r{sid}"

    def index(self, prefix: str, imap, at=None) -> str:
        """The element offset; ``at`` renames loop variables ({axis: name})."""
        at = at or {}
        terms = [f"{prefix}_o"] if imap.offset else []
        for a, st in enumerate(imap.strides):
            i = at.get(a, f"i{a}")
            if st == 1:
                terms.append(i)
            elif st != 0:
                terms.append(f"{i} * {prefix}_s{a}")
        return " + ".join(terms) or "0"

    def declare_io(self, prefix, io, depth, const):
        t = _STORE_T[io.dtype]
        qual = "const " if const else ""
        k = int(prefix[2:]) if prefix.startswith("in") else len(self.s.inputs) + int(prefix[3:])
        restrict = "" if prefix in self.aliased else "restrict "
        self.line(depth, f"{qual}{t} *{restrict}{prefix} = ({qual}{t} *)bufs[{k}];")
        if io.index.offset:
            self.line(depth, f"const int64_t {prefix}_o = {self.arg(io.index.offset)};")
        for a, st in enumerate(io.index.strides):
            if st not in (0, 1):
                self.line(depth, f"const int64_t {prefix}_s{a} = {self.arg(st)};")

    # -- expressions --
    def expr(self, sid: int) -> str:
        st = self.s.body[sid]
        t = ComputeType(_COMPUTE_T[st.dtype], st.dtype)
        if st.op == "load":
            at = self.index(f"in{st.attr}", self.s.inputs[st.attr].index)
            return load_value(st.dtype, f"in{st.attr}[{at}]")
        if st.op == "gather":
            k = st.attr[0]
            at = self.index(f"in{k}", self.s.inputs[k].index)
            row = f"g{sid}" if sid in self.based else self.gather_offset(sid)
            return load_value(st.dtype, f"in{k}[{at} + {row}]")
        if st.op == "scalar":
            return f"s{st.attr}"
        if st.op == "const":
            return _fmt_const(st.attr, st.dtype)
        args = [self.var(a) for a in st.args]
        codes = [self.s.body[a].dtype for a in st.args]
        if st.op == "reduce":  # over no axes (size-1 axes were coalesced away)
            return self.reduce_identity(st, args[0], codes[0])
        return lower_statement("c", st, codes[0], t, args, self.s.name)

    def reduce_identity(self, st, a, code):
        kind = combine_of(st)
        if kind in (Combine.ANY, Combine.ALL):
            return f"({a} != 0)"
        if kind in (Combine.ARGMAX, Combine.ARGMIN):
            return "INT64_C(0)"
        return f"({_COMPUTE_T[st.dtype]}){a}"

    def needed(self, targets, stop=()) -> list[int]:
        return statements_needed(self.s, targets, self.row_done, stop)

    def compute(self, sids, depth, element: bool):
        for sid in sids:
            st = self.s.body[sid]
            if self.elem[sid] != element or sid in self.row_done:
                continue
            if st.op == "reduce" and self.red:
                continue
            self.line(depth, f"{_COMPUTE_T[st.dtype]} {self.var(sid)} = {self.expr(sid)};")
            if not element:
                self.row_done.add(sid)
                self.gather_bases(sid, depth)

    def gather_bases(self, sid, depth):
        """Right after index value ``sid`` is computed outside the element loop,
        the offset of each row it gathers: the loop then reads a plain row
        (``in1[i2 + g5]``), which GCC vectorizes; with the clamp inside the
        loop it did not (the embedding sum of a GPT, 512 rows of 128: 36 us
        scalar, 9 us as rows)."""
        for g in self.indexes.get(sid, ()):
            self.line(depth, f"const int64_t g{g} = {self.gather_offset(g)};")
            self.based.add(g)

    def gather_offset(self, g) -> str:
        """Where gather ``g``'s row starts: its index clamped (``lz_gidx``) times
        the row stride, both runtime integers of the kernel."""
        st = self.s.body[g]
        _, stride, size, negative = st.attr[:4]
        if g not in self.gathers:
            self.gathers[g] = (self.arg(stride), self.arg(size))
        g_stride, g_size = self.gathers[g]
        return (f"lz_gidx((int64_t){self.var(st.args[0])}, {g_size}, {int(negative)}) "
                f"* {g_stride}")

    def hoist(self, sid, depth, nonempty):
        """``sid`` computed once at ``depth``, before loops that need it; its reads
        guarded by ``nonempty`` (a size-0 kernel's inputs may hold nothing)."""
        st = self.s.body[sid]
        value = self.expr(sid)
        if st.op in ("load", "gather"):
            value = f"({nonempty} ? {value} : 0)"
        self.line(depth, f"const {_COMPUTE_T[st.dtype]} {self.var(sid)} = {value};")
        self.row_done.add(sid)
        self.gather_bases(sid, depth)

    def store(self, k, out, depth):
        v = self.var(out.value)
        val = store_value(out.dtype, v)
        self.line(depth, f"out{k}[{self.index(f'out{k}', out.index)}] = {val};")

    # -- structure --
    def run(self) -> CKernel:
        s = self.s
        nd = len(s.domain)
        self.symbol = _symbol(s)
        self.line(0, f"/* {s.name.split('_', 1)[-1]}: {s.comment} */")
        self.line(0, f"void {self.symbol}(char *const *restrict bufs, "
                     "const int64_t *restrict ia, const double *restrict fa)")
        self.line(0, "{")
        for a in range(nd):
            self.line(1, f"const int64_t n{a} = {self.arg(s.domain[a])};")
        total = " * ".join(f"n{a}" for a in range(nd)) or "1"
        self.line(1, f"const int64_t total = {total};")
        self.line(1, f"const int64_t lz_work = total * {self.work_per_element()};")
        self.line(1, "(void)total; (void)lz_work; (void)fa;")
        for k, io in enumerate(s.inputs):
            self.declare_io(f"in{k}", io, 1, True)
        for k, io in enumerate(s.outputs):
            self.declare_io(f"out{k}", io, 1, False)
        for r in self.layout.scalars:  # fa: this kernel's words, in order
            word = f"((const int64_t *)fa)[{r.k}]" if r.int_bits else f"fa[{r.k}]"
            t = _COMPUTE_T[r.dtype]
            value = f"({word} != 0)" if r.dtype == D.BOOL else f"({t}){word}"
            self.line(1, f"const {t} s{r.k} = {value};")
        self.hoist_invariants()
        if is_scan(s):
            self.scan_body()
        elif not self.red:
            self.pointwise_body(nd)
        else:
            self.reduction_body()
        self.line(0, "}")
        source = _PRELUDE + "\n" + "\n".join(self.out) + "\n"
        buffers = tuple(i.buffer for i in s.inputs) + tuple(o.buffer for o in s.outputs)
        return CKernel(s.name, source, tuple(self.iargs), buffers, tuple(s.scalar_params),
                       self.symbol, self.layout)

    def work_per_element(self) -> int:
        """An element's work in units of a memory-bound element (what the host's
        parallel break-even ``LZ_PAR_MIN`` was measured on): each costly op
        (exp, erf, pow...) counts COSTLY_WORK more. Exact GELU's 512x512 kernel
        ran 0.30 ms alone and 0.18 ms on 2 threads, below the plain break-even."""
        return 1 + COSTLY_WORK * sum(is_costly(st) for st in self.s.body)

    def hoist_invariants(self):
        """The kernel's loop-invariant statements (:func:`loop_invariant`), computed
        once before the loops. A 0-d input is read only where the kernel has
        elements: a size-0 kernel's inputs may hold none."""
        for sid in self.layout.invariant:
            self.hoist(sid, 1, "total > 0")

    def pointwise_body(self, nd):
        everything = self.needed([o.value for o in self.s.outputs])
        if nd == 0:
            self.line(1, "{")
            self.element(everything, 2)
            self.line(1, "}")
            return
        if nd == 1 and self.streamable(self.s.outputs, 0):
            self.streamed_pointwise_body()
            return
        transposing = self.transposing()
        if transposing is not None:
            done = set(self.row_done)  # the plain loops compute the same statements again
            self.tiled_pointwise_body(nd, everything, *transposing)
            self.row_done = done
            self.line(1, "} else {")
            self.plain_pointwise_loops(nd, everything, 2)
            self.line(1, "}")
            return
        self.plain_pointwise_loops(nd, everything, 1)

    def plain_pointwise_loops(self, nd, everything, base):
        for a in range(nd):
            depth = base + a
            if a == 0 and nd == 1:
                # "parallel:": an if clause without it applies to the simd construct
                # too (OpenMP 5), so a loop below the threshold ran unvectorized
                self.line(depth, "#pragma omp parallel for simd "
                                 "if(parallel: lz_work > LZ_PAR_MIN)")
            elif a == 0:
                collapse = f" collapse({nd - 1})" if nd > 2 else ""
                self.line(depth, f"#pragma omp parallel for{collapse} "
                                 "if(parallel: lz_work > LZ_PAR_MIN) schedule(static)")
            elif a == nd - 1:
                self.hoist_along(depth, a, everything)
                self.line(depth, "#pragma omp simd")
            self.line(depth, f"for (int64_t i{a} = 0; i{a} < n{a}; i{a}++) {{")
        self.element(everything, base + nd)
        for a in reversed(range(nd)):
            self.line(base + a, "}")

    def hoist_along(self, depth, axis, targets):
        """Before the simd loop along ``axis``: the statements ``targets`` need that
        are one value along it (a row's mean and rstd in a column sum, an
        embedding's token id per row, each gathered row's base: see
        :meth:`gather_bases`), computed once instead of per element. The caller
        restores ``row_done`` where the loop's statements are computed again
        elsewhere. Reads from an aliased input stay in the loop (the loop may write
        the element), and every read waits for a non-empty loop."""
        varies = varies_along(self.s, (axis,))
        sids = [x for x in self.needed(targets) if not varies[x]]
        body = self.s.body
        if self.red and any(body[x].op == "reduce" for x in sids):
            return  # a reduction's value is known only after its loop
        loaded = {body[x].attr if body[x].op == "load" else body[x].attr[0]
                  for x in sids if body[x].op in ("load", "gather")}
        if any(f"in{k}" in self.aliased for k in loaded):
            return
        for sid in sids:
            self.hoist(sid, depth, f"n{axis} > 0")

    def element(self, everything, depth):
        """One element of a pointwise kernel: its statements, then its stores."""
        self.compute(everything, depth, False)
        for k, o in enumerate(self.s.outputs):
            self.store(k, o, depth)

    # -- transposing kernels: the last axis and the one another array is contiguous along --
    def transposing(self):
        """``(p, strided, transpose)`` for a kernel where some array strides along
        the last axis while it is contiguous along axis ``p`` (a transpose:
        attention's head split, ``x.t() * s``), else None. ``strided`` names the
        arrays striding along the last axis; ``transpose``: they are as many as the
        contiguous ones. Walking the last axis alone, each strided access touches
        a new cache line; walking tiles of ``p`` x last, lines are reused across
        the tile (see ``TILES``). Not where an output is written over an input
        (``aliased``): tiles would change which element is read before it is written."""
        if self.aliased:
            return None
        last = len(self.s.domain) - 1
        ios = [(f"in{k}", io) for k, io in enumerate(self.s.inputs)]
        ios += [(f"out{k}", io) for k, io in enumerate(self.s.outputs)]
        strided = [(name, io.index.strides) for name, io in ios
                   if io.index.strides[last] not in (0, 1)]
        p = next((a for _, st in strided for a in range(last) if st[a] == 1), None)
        if p is None:
            return None
        contiguous = sum(io.index.strides[last] == 1 for _, io in ios)
        return p, [name for name, _ in strided], len(strided) >= contiguous

    def tiled_pointwise_body(self, nd, everything, p, strided, transpose: bool):
        """Pointwise loops over tiles of axes ``p`` and the last (``TILES``), the
        other axes and both tile indices one parallel loop, inside an ``if`` the
        caller closes: both axes span 16 elements or more, and a ``strided``
        array's stride is a multiple of 4 KB or (``transpose``) every strided
        array's stride spans a cache line."""
        last = nd - 1
        outer = [a for a in range(nd) if a not in (p, last)]
        aliasing = " || ".join(f"(({x}_s{last} * (int64_t)sizeof(*{x})) & 4095) == 0"
                               for x in strided)
        wide = " && ".join(f"{x}_s{last} * (int64_t)sizeof(*{x}) >= 64" for x in strided)
        (along, across), (along_4k, across_4k) = TILES
        self.line(1, f"const int lz_4k = {aliasing};  /* strided lines share an L1 set */")
        tile = f"(lz_4k || ({wide}))" if transpose else "lz_4k"
        self.line(1, f"if (n{p} >= 16 && n{last} >= 16 && {tile}) {{")
        self.line(2, f"const int64_t t{last} = lz_4k ? {along_4k} : {along};")
        self.line(2, f"const int64_t t{p} = lz_4k ? {across_4k} : {across};")
        self.line(2, f"#pragma omp parallel for collapse({nd}) "
                     "if(parallel: lz_work > LZ_PAR_MIN) schedule(static)")
        depth = 2
        for a in outer:
            self.line(depth, f"for (int64_t i{a} = 0; i{a} < n{a}; i{a}++) {{")
            depth += 1
        for a in (p, last):
            self.line(depth, f"for (int64_t b{a} = 0; b{a} < n{a}; b{a} += t{a}) {{")
            depth += 1
        for a in (p, last):
            self.line(depth, f"const int64_t e{a} = b{a} + t{a} < n{a} ? b{a} + t{a} : n{a};")
        self.line(depth, f"for (int64_t i{p} = b{p}; i{p} < e{p}; i{p}++) {{")
        self.hoist_along(depth + 1, last, everything)
        self.line(depth + 1, "#pragma omp simd")
        self.line(depth + 1, f"for (int64_t i{last} = b{last}; i{last} < e{last}; i{last}++) {{")
        self.element(everything, depth + 2)
        self.line(depth + 1, "}")
        self.line(depth, "}")
        for d in reversed(range(2, depth)):
            self.line(d, "}")

    # -- streamed stores (see lz_stream_bytes in lazyrt_math.h) --
    def streamable(self, outs, axis, cheap_store=False) -> bool:
        """Whether to store ``outs`` in tiles, streamed when large: every output
        is contiguous along ``axis`` and the kernel is memory-bound (or
        ``cheap_store``: the loop that stores is). Streaming stalls a
        compute-bound loop (non-temporal bursts wait for memory: GELU 2^24,
        1 thread, 54 -> 58 ms), so kernels with a costly op store directly."""
        if not cheap_store and any(is_costly(st) for st in self.s.body):
            return False
        return bool(outs) and all(o.index.strides[axis] == 1 for o in outs)

    def declare_stream(self, depth, outs, count):
        """The runtime choice (outputs over ~L3 size are streamed) and the tiles."""
        nbytes = " + ".join(f"(int64_t)sizeof(*out{k})" for k, _ in outs)
        self.line(depth, f"const int lz_stream = {count} * ({nbytes}) >= LZ_STREAM_MIN_BYTES;")

    def declare_tiles(self, depth, outs):
        for k, o in outs:
            self.line(depth, f"{_STORE_T[o.dtype]} tile{k}[LZ_TILE] __attribute__((aligned(64)));")

    def open_tile(self, depth, outs, a, base):
        """One tile of axis ``a`` from ``b{a}``: each output's destination is its
        tile (streamed) or the output itself; ``base`` maps an output's index
        expression to its position at ``i{a} = b{a}``."""
        self.line(depth, f"const int64_t e{a} = b{a} + LZ_TILE < n{a} ? b{a} + LZ_TILE : n{a};")
        for k, o in outs:
            t = _STORE_T[o.dtype]
            restrict = "" if f"out{k}" in self.aliased else "restrict "
            self.line(depth, f"{t} *{restrict}d{k} = lz_stream ? tile{k} : out{k} + {base(k, o)};")

    def close_tile(self, depth, outs, a, base):
        for k, o in outs:
            self.line(depth, f"if (lz_stream) lz_stream_bytes(out{k} + {base(k, o)}, tile{k}, "
                             f"(size_t)(e{a} - b{a}) * sizeof(*out{k}));")

    def tile_store(self, k, out, depth, a):
        v = self.var(out.value)
        self.line(depth, f"d{k}[i{a} - b{a}] = {store_value(out.dtype, v)};")

    def streamed_pointwise_body(self):
        """A 1-D pointwise loop in tiles of LZ_TILE: stored directly, or (large
        outputs) computed into L1 tiles and streamed out."""
        outs = list(enumerate(self.s.outputs))
        everything = self.needed([o.value for o in self.s.outputs])
        self.declare_stream(1, outs, "total")
        self.line(1, "#pragma omp parallel if(parallel: lz_work > LZ_PAR_MIN)")
        self.line(1, "{")
        self.declare_tiles(2, outs)
        self.line(2, "#pragma omp for schedule(static)")
        self.line(2, "for (int64_t b0 = 0; b0 < n0; b0 += LZ_TILE) {")

        def base(k, o):
            return self.index(f"out{k}", o.index, {0: "b0"})
        self.open_tile(3, outs, 0, base)
        self.line(3, "#pragma omp simd")
        self.line(3, "for (int64_t i0 = b0; i0 < e0; i0++) {")
        self.compute(everything, 4, False)
        for k, o in outs:
            self.tile_store(k, o, 4, 0)
        self.line(3, "}")
        self.close_tile(3, outs, 0, base)
        self.line(2, "}")
        self.line(2, "if (lz_stream) lz_stream_fence();")
        self.line(1, "}")
