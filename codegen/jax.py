"""Graph -> the source of one ``jax.numpy`` function (the JAX backend's emitter).

XLA fuses on its own, so the JAX path lowers the whole captured graph to one
pure, shape-static function instead of one function per kernel spec (the
one exception to "emitters see only KernelSpecs", by design). Each op's
expression comes from its op-table entry (``op.lower["jax"]``, the
vocabulary of ``lazyrt/lowering/jax.py``); an op without one fails here, by
name. The function's parameters are the graph's parameters in capture order
(data arrays, and runtime scalars as 0-d arrays: traced, so a new value
never retraces); baked constants are literals (static).

>>> import numpy as np, lazyrt as lr
>>> with lr.backend("numpy"):
...     y = lr.tensor(np.ones(3, "float32")) * 2.0
...     _ = y.numpy()
>>> source, name = emit_graph(lr.debug.last_record().graph, "g")
>>> print(source.splitlines()[-3].strip())
v2 = jnp.multiply(v0, v1)  # <doctest codegen.jax[0]>:3
"""
from __future__ import annotations

from lazyrt import dtypes as D
from lazyrt import ops
from lazyrt.lowering import EmitError
from lazyrt.lowering.jax import JNP_DTYPE, JaxNode, literal

HEADER = """\
import jax
import jax.numpy as jnp
from jax import lax
from lazyrt.kernels import jax_math as lzj
"""


def _literal(value, code) -> str:
    """A baked constant of dtype ``code`` as source."""
    kind = float if code in D.FLOATING else (bool if code == D.BOOL else int)
    return literal(kind(value))


def emit_graph(graph, name: str) -> tuple[str, str]:
    """``(source, function name)`` of ``graph`` as one JAX function. Raises
    :class:`~lazyrt.lowering.EmitError` naming an op JAX cannot express."""
    nodes = graph.nodes
    param_pos = {p: k for k, p in enumerate(graph.params)}
    args = [f"p{k}" for k in range(len(graph.params))]
    body = []
    for i, n in enumerate(nodes):
        ty = f"{D.NAMES[n.dtype]}{list(n.shape)}"
        where = n.source
        note = f"  # {where}" if where else ""
        jt = JNP_DTYPE[n.dtype]
        if i in param_pos:
            body.append(f"v{i} = jnp.asarray(p{param_pos[i]}, {jt})  # param {param_pos[i]}: {ty}")
            continue
        if n.op is ops.CONST:
            body.append(f"v{i} = jnp.asarray({_literal(n.value, n.dtype)}, {jt})")
            continue
        lower = n.op.lower.get("jax")
        if lower is None:
            raise EmitError(f"the jax emitter has no lowering for op {n.op.name!r} "
                            f"(node %{i}{note.replace('  #', ',')})")
        in_dtype = nodes[n.inputs[0]].dtype if n.inputs else n.dtype
        attrs = n.attrs
        if n.op.kind in (ops.REDUCTION, ops.SCAN) and n.op.accumulator is not None:
            attrs = (*attrs, n.op.accumulator(in_dtype))
        if n.op.kind == ops.SCAN:  # include_initial's first element
            attrs = (*attrs, n.op.identity(in_dtype))
        operands = [f"v{j}" for j in n.inputs]
        arith = getattr(lower, "arithmetic", False)
        half = arith and n.dtype in D.REDUCED_FLOATS
        if half:  # computed in float32, rounded once, as NumPy's float16 loops (ml_dtypes')
            operands = [a if nodes[j].dtype == D.FLOAT32 else f"{a}.astype(jnp.float32)"
                        for a, j in zip(operands, n.inputs)]
        elif arith:  # computed in the result's dtype (bool / bool is a float division)
            operands = [a if nodes[j].dtype == n.dtype else f"{a}.astype({jt})"
                        for a, j in zip(operands, n.inputs)]
        try:
            expr = lower(JaxNode(n.dtype, in_dtype, n.shape, attrs, i), *operands)
        except EmitError as exc:
            raise EmitError(f"the jax emitter cannot lower {n.op.name} {exc} "
                            f"(node %{i}{note.replace('  #', ',')})") from None
        if half:
            expr = f"lzj.{'half' if n.dtype == D.FLOAT16 else 'bfloat'}({expr})"
        body.append(f"v{i} = {expr}{note}")
    outs = ", ".join(f"v{i}" for i in graph.outputs)
    lines = [HEADER, "", f"def {name}({', '.join(args)}):",
             f'    """graph {graph.key:016x}: {len(nodes)} nodes, {graph.n_ops} ops"""']
    lines += [f"    {b}" for b in body]
    lines.append(f"    return ({outs}{',' if len(graph.outputs) == 1 else ''})")
    return "\n".join(lines) + "\n", name
