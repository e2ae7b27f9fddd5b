"""Triton source for a ``scatter_add`` kernel (``gather_scatter.py``); a gather is
fused into the kernels that use it (a ``gather`` statement, ``codegen/triton.py``).

One flat program per ``BLOCK`` elements of the indices' shape; each element's
coordinates come from its flat position (sizes are runtime arguments, in
``spec.iargs()`` order after the pointers and ``fa``). The pointers: the
values, the indices, the accumulator
(:func:`scatter_accumulator`), which the launcher zeroes first and converts
into the result after, and ``flag``, two int64: an index out of range sets
``flag[0]`` and writes itself to ``flag[1]`` (then is clamped, never followed),
and the launcher raises IndexError from them: on a GPU once per program run,
after its launches (no wait per kernel, and CUDA graphs capture it).

scatter_add is a ``tl.atomic_add`` per element: the order in which a result element's
contributions arrive is the hardware's, so float sums may differ from
``np.add.at``'s sequential order by rounding (tested within float tolerances;
ints are exact). float16 adds in float32, int8/uint8/bool in int32, wrapped (or
``!= 0`` for bool) when the launcher converts.
"""
from __future__ import annotations

from lazyrt import dtypes as D

from .gather_scatter import SCATTER_ADD, GatherScatterSpec

HEADER = """\
import triton
import triton.language as tl
"""

#: elements per program
BLOCK = 1024

#: the dtype a scatter_add accumulates in with atomics: one Triton can add
_ATOMIC_ACC = {D.BOOL: D.INT32, D.INT8: D.INT32, D.UINT8: D.INT32, D.INT32: D.INT32,
               D.INT64: D.INT64, D.FLOAT16: D.FLOAT32, D.FLOAT32: D.FLOAT32,
               D.FLOAT64: D.FLOAT64, D.BFLOAT16: D.FLOAT32}
_TL = {D.INT32: "tl.int32", D.INT64: "tl.int64", D.FLOAT32: "tl.float32",
       D.FLOAT64: "tl.float64"}


def scatter_accumulator(spec: GatherScatterSpec) -> int:
    """The dtype of the buffer a Triton scatter adds into (the result's own when equal)."""
    return _ATOMIC_ACC[spec.dtype]


def emit_gather_triton(spec: GatherScatterSpec) -> tuple:
    """(name, source) of the jitted kernel for ``spec``, a scatter_add (a gather runs
    inside the kernels that use it: ``codegen/triton.py``)."""
    if spec.kind != SCATTER_ADD:
        raise ValueError(f"lazyrt internal: {spec.kind} has no kernel of its own")
    name = f"lz_{spec.name}"
    r, a = len(spec.shape), spec.axis
    sizes = [f"n{k}" for k in range(r)]
    params = (["data", "idx", "out", "flag", "fa"] + sizes + ["d_o"] + [f"d_s{k}" for k in range(r)]
              + ["x_o"] + [f"x_s{k}" for k in range(r)] + ["size", "BLOCK: tl.constexpr"])
    lines = [f"# {spec.kind} along axis {a} of a rank-{r} {D.NAMES[spec.dtype]} tensor by "
             f"{D.NAMES[spec.index_dtype]} indices",
             "@triton.jit", f"def {name}({', '.join(params)}):",
             "    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
             "    rest = e"]
    for k in reversed(range(r)):
        if k:
            lines += [f"    i{k} = rest % n{k}", f"    rest = rest // n{k}"]
        else:
            lines += ["    i0 = rest", "    mask = i0 < n0  # e past the end (sizes are > 0)"]
    index = " + ".join(["x_o"] + [f"i{k} * x_s{k}" for k in range(r)])
    lines.append(f"    j = tl.load(idx + {index}, mask=mask, other=0).to(tl.int64)")
    low = "-size" if spec.negative else "0"
    lines += [f"    bad = mask & ((j < {low}) | (j >= size))",
              "    tl.store(flag + 0 * e, 1, mask=bad)  # the launcher raises IndexError",
              "    tl.store(flag + 1 + 0 * e, j, mask=bad)  # naming one of them"]
    if spec.negative:
        lines.append("    j = tl.where(j < 0, j + size, j)")
    lines.append("    j = tl.minimum(tl.maximum(j, 0), size - 1)  # never out of bounds")
    m = ["size" if k == a else f"n{k}" for k in range(r)]
    dest = " + ".join([f"i{k} * {' * '.join(m[k + 1:]) or 1}" for k in range(r) if k != a]
                      + [f"j * {' * '.join(m[a + 1:]) or 1}"])
    value = "data + " + " + ".join(["d_o"] + [f"i{k} * d_s{k}" for k in range(r)])
    acc = _TL[scatter_accumulator(spec)]
    lines += [f"    v = tl.load({value}, mask=mask, other=0).to({acc})",
              f"    tl.atomic_add(out + ({dest}), v, mask=mask)"]
    return name, HEADER + "\n\n" + "\n".join(lines) + "\n"
