"""C source for a ``scatter_add`` kernel (``gather_scatter.py``); a gather is
fused into the kernels that use it (a ``gather`` statement, ``codegen/c.py``).

One function per (dtype, index dtype, rank, axis, negative rule); sizes,
strides and offsets are runtime arguments (``ia``, in ``spec.iargs()`` order), so
a new batch size reuses the binary. Buffers: ``bufs[0]`` the values,
``bufs[1]`` the indices, ``bufs[2]`` the result, and for a float16 or bfloat16
scatter ``bufs[3]`` a float32 scratch as large as the result.

scatter_add: deterministic and equal to ``np.add.at``: the
contributions to one result element share every coordinate but ``axis``, so
threads split the last non-``axis`` dimension and each adds its elements in C
order; every element's sum is taken in exactly NumPy's order (float16 and bfloat16 in float32,
rounded once at the end; ints wrap; bool is or).
"""
from __future__ import annotations

from lazyrt import dtypes as D

from lazyrt.lowering.c import _STORE_T, load_value, store_value

from .gather_scatter import SCATTER_ADD, GatherScatterSpec

_PRELUDE = """\
#include <stdint.h>
#include <omp.h>
#include "lazyrt_math.h"
"""

_UNSIGNED = {D.INT8: "uint8_t", D.UINT8: "uint8_t", D.INT32: "uint32_t", D.INT64: "uint64_t"}


def scatter_scratch(spec: GatherScatterSpec) -> bool:
    """Whether a scatter kernel accumulates in a float32 scratch (float16, bfloat16 data)."""
    return spec.dtype in D.REDUCED_FLOATS


def _term(i, stride, name):
    """``i * name`` for a runtime stride; strides 0 and 1 are baked in, so a
    broadcast index is loop-invariant and a contiguous row vectorizes."""
    return None if stride == 0 else (i if stride == 1 else f"{i} * {name}")


def _sum(terms) -> str:
    return " + ".join(t for t in terms if t is not None) or "0"


def emit_gather_c(spec: GatherScatterSpec) -> tuple:
    """(symbol, source) of the kernel for ``spec``, a scatter_add (a gather runs
    inside the kernels that use it: ``codegen/c.py``)."""
    if spec.kind != SCATTER_ADD:
        raise ValueError(f"lazyrt internal: {spec.kind} has no kernel of its own")
    pattern = "".join("z" if st == 0 else ("u" if st == 1 else "s")
                      for st in spec.data_strides + spec.index_strides)
    symbol = f"lz_{spec.name}_{pattern}"
    r, a = len(spec.shape), spec.axis
    t, it = _STORE_T[spec.dtype], _STORE_T[spec.index_dtype]
    lines = [f"/* {spec.kind} along axis {a} of a rank-{r} {D.NAMES[spec.dtype]} tensor by "
             f"{D.NAMES[spec.index_dtype]} indices */",
             f"void {symbol}(char *const *restrict bufs, const int64_t *restrict ia, "
             "const double *restrict fa)", "{", "    (void)fa;"]
    names = ([f"n{k}" for k in range(r)] + ["d_o"] + [f"d_s{k}" for k in range(r)]
             + ["x_o"] + [f"x_s{k}" for k in range(r)] + ["size"])
    lines += [f"    const int64_t {v} = ia[{k}];" for k, v in enumerate(names)]
    lines.append(f"    const int64_t total = {' * '.join(f'n{k}' for k in range(r))};")
    lines.append(f"    const {t} *restrict data = (const {t} *)bufs[0];")
    lines.append(f"    const {it} *restrict idx = (const {it} *)bufs[1];")
    lines.append(f"    {t} *restrict out = ({t} *)bufs[2];")
    loops = [f"for (int64_t i{k} = 0; i{k} < n{k}; i{k}++)" for k in range(r)]
    index = _sum(["x_o"] + [_term(f"i{k}", spec.index_strides[k], f"x_s{k}") for k in range(r)])
    wrap = ["int64_t j = (int64_t)idx[" + index + "];"]
    if spec.negative:
        wrap.append("if (j < 0) j += size;")
    wrap.append("j = j < 0 ? 0 : (j >= size ? size - 1 : j);  /* range checked before */")
    lines.append("    (void)" + "; (void)".join(names) + ";")
    lines += _scatter_body(spec, r, a, loops, wrap)
    lines.append("}")
    return symbol, _PRELUDE + "\n" + "\n".join(lines) + "\n"


def _scatter_body(spec, r, a, loops, wrap):
    t = _STORE_T[spec.dtype]
    scratch = scatter_scratch(spec)
    acc_t = "float" if scratch else t
    m = [("size" if k == a else f"n{k}") for k in range(r)]
    out = [f"    const int64_t out_total = {' * '.join(m)};",
           "    if (out_total == 0) return;",
           f"    {acc_t} *restrict acc = {'(float *)bufs[3]' if scratch else 'out'};"]
    strides = []  # the result's contiguous strides
    for k in range(r):
        strides.append(" * ".join(m[k + 1:]) or "1")
    dest = " + ".join([f"i{k} * ({strides[k]})" for k in range(r) if k != a]
                      + [f"j * ({strides[a]})"])
    value = "data[" + _sum(["d_o"] + [_term(f"i{k}", spec.data_strides[k], f"d_s{k}")
                                      for k in range(r)]) + "]"
    if spec.dtype == D.BOOL:
        add = f"acc[o] |= {value};"
    elif spec.dtype in _UNSIGNED:  # wraps, as NumPy's int add (no signed overflow in C)
        u = _UNSIGNED[spec.dtype]
        add = f"acc[o] = ({t})(({u})acc[o] + ({u}){value});"
    else:
        add = f"acc[o] += {load_value(spec.dtype, value)};"
    # threads split the last axis that is not ``axis``: each result element is
    # summed by one thread, in C order
    split = max((k for k in range(r) if k != a), default=None)
    out.append("    #pragma omp parallel if(parallel: total > LZ_PAR_MIN)")
    out.append("    {")
    out.append("        #pragma omp for schedule(static)")
    out.append("        for (int64_t e = 0; e < out_total; e++) acc[e] = 0;")
    out.append("        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();")
    if split is None:
        out.append("        if (t == 0) {")
        out.append("        const int64_t lo = 0, hi = 1; (void)lo; (void)hi;")
    else:
        out.append(f"        const int64_t lo = n{split} * t / nt, hi = n{split} * (t + 1) / nt;")
        out.append("        {")
    depth = 2
    for k in range(r):
        if k == split:
            out.append("    " * depth + f"for (int64_t i{k} = lo; i{k} < hi; i{k}++) {{")
        else:
            out.append("    " * depth + loops[k] + " {")
        depth += 1
    out += ["    " * depth + w for w in wrap]
    out.append("    " * depth + f"const int64_t o = {dest};")
    out.append("    " * depth + add)
    for _ in range(r):
        depth -= 1
        out.append("    " * depth + "}")
    out.append("        }")
    if scratch:
        out.append("        #pragma omp barrier")
        out.append("        #pragma omp for schedule(static)")
        out.append("        for (int64_t e = 0; e < out_total; e++) "
                   f"out[e] = {store_value(spec.dtype, 'acc[e]')};")
    out.append("    }")
    return out
