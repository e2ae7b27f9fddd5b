"""Triton matmul template with an epilogue hook (source text, filled per matmul).

An emitter like :mod:`lazyrt.codegen.triton`, whose helpers it reuses: it
lives in ``codegen/``, since ``kernels/`` (hand-written pieces) imports
nothing from ``codegen/``.

One program per ``BLOCK_M x BLOCK_N`` output tile (grouped ordering for L2
reuse) and per batch index, flattened into one grid axis; batch strides per
operand (0 where the operand is broadcast). The K loop accumulates with
``tl.dot`` in float32 (float64 for float64 operands; IEEE precision for
float32, not TF32, to match NumPy). After the loop, the planner's epilogue
KernelSpec (``MatmulStep.epilogue``: its ``inputs[0]`` is the product) is
emitted inline on the accumulator tile, so ``gelu(x @ w + b)`` and a
residual add are ONE kernel; the product itself is never stored.

Pure like the emitters: :func:`emit_matmul` takes a :class:`MatmulSpec` (the
operands' buffers and views, the product's buffer, shape and dtype: no
planner step) plus the epilogue's KernelSpec, and returns source text and
launch metadata; :mod:`lazyrt.backends.triton` compiles and launches it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lazyrt import dtypes as D
from lazyrt.codegen.layout import scalar_reads
from lazyrt.codegen.triton import HEADER, scalar_loads, triton_cdiv
from lazyrt.lowering.triton import (_COMPUTE_T, _STORE_T, EmitError, expression, load_expr,
                                    store_value)
from lazyrt.planner.kernel_ir import IndexMap
from lazyrt.planner.strided import contiguous_strides


@dataclass(frozen=True)
class MatmulSpec:
    """One matmul, as the emitter needs it: ``out = a @ b`` over buffers.

    ``a_view`` and ``b_view`` are strided views (offset, shape, strides in
    elements; batch dims broadcast by stride 0) of buffers ``a`` and ``b``;
    ``out`` is the product's buffer, contiguous, of ``shape`` and ``dtype``.
    """
    a: int
    a_view: object
    b: int
    b_view: object
    out: int
    shape: tuple
    dtype: int


@dataclass(frozen=True)
class MatmulKernel:
    name: str
    source: str
    buffers: tuple            # a, b, epilogue inputs 1.., outputs
    iargs: tuple
    m: int
    n: int
    batch: int
    empty: bool
    kind: str = "matmul"

    def grid(self):
        m, n, batch = self.m, self.n, self.batch
        return lambda meta: (triton_cdiv(m, meta["BLOCK_M"]) * triton_cdiv(n, meta["BLOCK_N"])
                             * batch,)


def _batch_strides(view, batch_shape):
    """Strides of ``view``'s batch dims aligned right to ``batch_shape`` (0 = broadcast)."""
    own = list(zip(view.shape[:-2], view.strides[:-2]))
    lead = len(batch_shape) - len(own)
    out = []
    for k, size in enumerate(batch_shape):
        if k < lead:
            out.append(0)
        else:
            n, s = own[k - lead]
            out.append(0 if n == 1 and size != 1 else s)
    return out


def emit_matmul(mm: MatmulSpec, ep=None) -> MatmulKernel:
    """Source of the matmul kernel for ``mm``, with the pointwise KernelSpec
    ``ep`` (its ``inputs[0]`` is the product, at full rank) applied to each
    output tile before it is stored; without ``ep`` the product is stored."""
    shape = tuple(mm.shape)
    code = mm.dtype
    a, b = mm.a_view, mm.b_view
    M, N = shape[-2], shape[-1]
    K = a.shape[-1]
    batch_shape = shape[:-2]
    nb = len(batch_shape)
    name = ep.name if ep is not None else f"k_matmul_{len(shape)}d"
    comment = ep.comment if ep is not None else "matmul"
    params, iargs, lines = [], [], []

    def arg(pname, value):
        params.append(pname)
        iargs.append(int(value))

    def line(depth, text):
        lines.append("    " * depth + text)

    for pname, v in (("M", M), ("N", N), ("K", K)):
        arg(pname, v)
    for k, size in enumerate(batch_shape):
        arg(f"nb{k}", size)
    arg("a_o", a.offset)
    arg("a_sm", a.strides[-2])
    arg("a_sk", a.strides[-1])
    arg("b_o", b.offset)
    arg("b_sk", b.strides[-2])
    arg("b_sn", b.strides[-1])
    for k, s in enumerate(_batch_strides(a, batch_shape)):
        arg(f"a_sb{k}", s)
    for k, s in enumerate(_batch_strides(b, batch_shape)):
        arg(f"b_sb{k}", s)

    # epilogue inputs 1.. and outputs (or the product buffer when there is none)
    if ep is not None:
        ins = list(ep.inputs[1:])
        outs = list(ep.outputs)
    else:
        ins = []
        outs = [_Out(mm.out, code, IndexMap(0, contiguous_strides(shape)))]
    for k, io in enumerate(ins, start=1):
        _io_args(arg, f"in{k}", io.index)
    for k, io in enumerate(outs):
        _io_args(arg, f"out{k}", io.index)

    acc_t = "tl.float64" if code == D.FLOAT64 else "tl.float32"
    integer = code not in D.FLOATING
    if integer:
        acc_t = "tl.int64"
    line(1, "pid = tl.program_id(0)")
    line(1, "num_m = tl.cdiv(M, BLOCK_M)")
    line(1, "num_n = tl.cdiv(N, BLOCK_N)")
    line(1, "tiles = num_m * num_n")
    line(1, "bid = pid // tiles")
    line(1, "pid = pid % tiles")
    line(1, "width = GROUP_M * num_n")
    line(1, "first_m = (pid // width) * GROUP_M")
    line(1, "group_m = tl.minimum(num_m - first_m, GROUP_M)")
    line(1, "pm = first_m + (pid % width) % group_m")
    line(1, "pn = (pid % width) // group_m")
    # batch indices i0.. from bid (row-major over the batch dims)
    if nb:
        line(1, "rem = bid")
        for k in reversed(range(nb)):
            if k == 0:
                line(1, f"i{k} = rem")
            else:
                line(1, f"i{k} = rem % nb{k}")
                line(1, f"rem = rem // nb{k}")
    a_base = " + ".join(["a_o"] + [f"i{k} * a_sb{k}" for k in range(nb)])
    b_base = " + ".join(["b_o"] + [f"i{k} * b_sb{k}" for k in range(nb)])
    line(1, "rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)")
    line(1, "rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)")
    line(1, "rk = tl.arange(0, BLOCK_K)")
    line(1, f"a_ptrs = a + ({a_base}) + rm[:, None] * a_sm + rk[None, :] * a_sk")
    line(1, f"b_ptrs = b + ({b_base}) + rk[:, None] * b_sk + rn[None, :] * b_sn")
    line(1, f"acc = tl.zeros([BLOCK_M, BLOCK_N], {acc_t})")
    line(1, "for k0 in range(0, K, BLOCK_K):")
    line(2, "kmask = (k0 + rk) < K")
    line(2, "av = tl.load(a_ptrs, mask=(rm[:, None] < M) & kmask[None, :], other=0)")
    line(2, "bv = tl.load(b_ptrs, mask=kmask[:, None] & (rn[None, :] < N), other=0)")
    if integer:
        line(2, "acc += tl.sum(av.to(tl.int64)[:, :, None] * bv.to(tl.int64)[None, :, :], "
                "axis=1)")
    elif code == D.FLOAT32:
        line(2, 'acc = tl.dot(av, bv, acc, input_precision="ieee")')
    else:
        line(2, "acc = tl.dot(av, bv, acc)")
    line(2, "a_ptrs += BLOCK_K * a_sk")
    line(2, "b_ptrs += BLOCK_K * b_sk")
    line(1, "mask = (rm[:, None] < M) & (rn[None, :] < N)")
    line(1, f"i{nb} = rm[:, None]")
    line(1, f"i{nb + 1} = rn[None, :]")
    product = f"acc.to({_COMPUTE_T[code]})"
    if code in D.REDUCED_FLOATS:  # accumulated in float32, rounded once
        product = f"acc.to({_STORE_T[code]}).to(tl.float32)"
    elif code == D.BOOL:
        product = "(acc != 0)"
    rank = len(shape)

    def address(prefix, imap):
        terms = ([f"{prefix}_o"] if imap.offset else []) + \
            [f"i{d}" if s == 1 else f"i{d} * {prefix}_s{d}"
             for d, s in enumerate(imap.strides) if s != 0]
        return " + ".join(terms) or "0"

    def tile_dep(imap):
        return imap.strides[rank - 2] != 0 or imap.strides[rank - 1] != 0

    if ep is None:
        line(1, f"tl.store(out0 + {address('out0', outs[0].index)}, "
                f"{store_value(product, code)}, mask=mask)")
    else:
        _epilogue(ep, line, address, tile_dep, product)
    ptrs = ["a", "b"] + [f"in{k}" for k in range(1, len(ins) + 1)] + \
        [f"out{k}" for k in range(len(outs))]
    consts = ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr",
              "GROUP_M: tl.constexpr"]
    head = [f"# {name}: {comment}",
            f"@triton.autotune(configs=lzm.{'MATMUL_INT_CONFIGS' if integer else 'MATMUL_CONFIGS'}, "
            "key=['M', 'N', 'K'])",
            "@triton.jit",
            f"def {name}({', '.join(ptrs + ['fa'] + params + consts)}):"]
    source = HEADER + "\n\n" + "\n".join(head + lines) + "\n"
    bufs = (mm.a, mm.b) + tuple(i.buffer for i in ins) + \
        tuple(o.buffer for o in outs)
    batch = math.prod(batch_shape)
    return MatmulKernel(name, source, bufs, tuple(iargs), M, N, batch,
                        empty=M * N * batch == 0)


@dataclass(frozen=True)
class _Out:
    buffer: int
    dtype: int
    index: IndexMap


def _io_args(arg, prefix, imap):
    if imap.offset:
        arg(f"{prefix}_o", imap.offset)
    for d, s in enumerate(imap.strides):
        if s not in (0, 1):
            arg(f"{prefix}_s{d}", s)


def _epilogue(ep, line, address, tile_dep, product):
    """The epilogue's body on the accumulator tile (every value is a tile or a scalar)."""
    def var(sid):
        return f"e{sid}"

    tile = {}
    for text in scalar_loads(scalar_reads(ep)):
        line(1, text)
    for st in ep.body:
        if st.op == "load" and st.attr == 0:
            e, tile[st.id] = product, True
        elif st.op == "load":
            io = ep.inputs[st.attr]
            dep = tile_dep(io.index)
            e = load_expr(f"in{st.attr}", address(f"in{st.attr}", io.index), io.dtype,
                          "mask" if dep else None)
            tile[st.id] = dep
        elif st.op == "scalar":
            e, tile[st.id] = f"s{st.attr}", False
        elif st.op == "reduce":
            raise EmitError(f"matmul epilogue {ep.name} has a reduction")
        else:
            e = expression(ep, st, var)
            tile[st.id] = any(tile[a] for a in st.args)
        line(1, f"{var(st.id)} = {e}")
    for k, o in enumerate(ep.outputs):
        v = var(o.value)
        if not tile[o.value]:
            v = f"tl.broadcast_to({v}, [BLOCK_M, BLOCK_N])"
        line(1, f"tl.store(out{k} + {address(f'out{k}', o.index)}, "
                f"{store_value(v, o.dtype)}, mask=mask)")
