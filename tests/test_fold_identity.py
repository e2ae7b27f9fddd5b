"""A reduction's or scan's identity and combine live in the op table only.

``OpDef.combine`` (a :class:`lazyrt.ops.Combine`) says how the op folds and
``OpDef.identity(code)`` what it starts from; the C, Triton and JAX emitters lay
the fold out by the first and render the second with their own constant
formatter, so neither is written down anywhere else.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import lazyrt as lr
from lazyrt import dtypes as D
from lazyrt import ops
from lazyrt.planner.kernel_ir import IndexMap, KernelInput, KernelOutput, KernelSpec, Stmt

REDUCTIONS = [op for op in ops.OPS if op.kind == ops.REDUCTION]
SCANS = [op for op in ops.OPS if op.kind == ops.SCAN]


def _samples(code) -> np.ndarray:
    """Values of dtype ``code`` that reach its ends (and NaN and the infinities)."""
    dt = D.DTYPES[code]
    if code == D.BOOL:
        return np.array([False, True])
    if code in D.FLOATING:
        big = float(ml_dtypes.finfo(dt).max)
        return np.array([-np.inf, -big, -1.5, 0.0, 2.0, big, np.inf, np.nan]).astype(dt)
    info = np.iinfo(dt)
    return np.array([info.min, info.min + 1, 0, 1, info.max - 1, info.max]).astype(dt)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or a.dtype == D.bfloat16:
        return np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True)
    return np.array_equal(a, b)


def test_every_reduction_and_scan_has_a_combine():
    for op in REDUCTIONS + SCANS:
        assert isinstance(op.combine, ops.Combine), op
    for op in ops.OPS:
        if op.kind not in (ops.REDUCTION, ops.SCAN):
            assert op.combine is None
            with pytest.raises(TypeError, match=op.name):
                op.identity(D.FLOAT32)
    assert ops.CUMSUM.combine is ops.SUM.combine and ops.CUMPROD.combine is ops.PROD.combine
    assert ops.REDUCTIONS == {op.name: op for op in REDUCTIONS}


@pytest.mark.parametrize("op", [op for op in REDUCTIONS if op not in (ops.ARGMAX, ops.ARGMIN)],
                         ids=str)
@pytest.mark.parametrize("code", range(D.NDTYPES), ids=lambda c: D.NAMES[c])
def test_the_identity_is_neutral_for_every_dtype(op, code):
    """Reducing [identity, x] gives what reducing [x] gives, for x at the dtype's
    ends, its infinities and NaN (a float sum's +0 aside: -0.0 + 0 is +0.0)."""
    x = _samples(code)
    first = np.full(x.shape, op.identity(code)).astype(x.dtype)
    assert _same(first, np.full(x.shape, op.identity(code))), "the identity is a value of the dtype"
    both = op.ref(np.stack([first, x]), ((0,), False))
    assert _same(both, op.ref(x[None], ((0,), False))), (op, D.NAMES[code], both)


@pytest.mark.parametrize("code", range(D.NDTYPES), ids=lambda c: D.NAMES[c])
def test_argmax_and_argmin_start_their_best_value_at_max_and_min_identity(code):
    assert ops.ARGMAX.identity(code) == ops.MAX.identity(code)
    assert ops.ARGMIN.identity(code) == ops.MIN.identity(code)


def _row_spec(op, code, dtype, acc) -> KernelSpec:
    """One kernel folding rows of 8 elements of dtype ``code`` by ``op`` into a
    ``dtype`` result accumulated in ``acc`` (as the planner builds it)."""
    load = Stmt(0, "load", code, (), 0)
    if op.kind == ops.SCAN:  # include_initial: the output's rows are one longer
        fold = Stmt(1, "scan", acc, (0,), (op, True), acc)
        out = KernelOutput(1, acc, IndexMap(1, (9, 1)), 1)
    else:
        fold = Stmt(1, "reduce", dtype, (0,), op.name, acc)
        out = KernelOutput(1, dtype, IndexMap(0, (1, 0)), 1)
    return KernelSpec(f"k0_fused_{op.name}", (4, 8), (1,),
                      (KernelInput(0, code, IndexMap(0, (8, 1))),), (), (load, fold), (out,))


def _emitters():
    from lazyrt.codegen.c import emit_c
    out = {"c": lambda spec: emit_c(spec).source}
    try:
        from lazyrt.codegen.triton import emit_triton
    except ImportError:  # no triton here: its emitter cannot be imported
        return out
    out["triton"] = lambda spec: emit_triton(spec).source
    return out


def test_emitters_start_every_fold_at_the_op_tables_identity(monkeypatch):
    """With the op table's identities changed, every emitter's accumulators (and
    a scan's include_initial element) start from the new ones: no emitter keeps
    a table of its own."""
    monkeypatch.setattr(ops.Combine, "identity", lambda self, code: 12345)
    cases = [(ops.SUM, D.FLOAT32, D.FLOAT32, D.FLOAT64), (ops.PROD, D.INT32, D.INT64, D.INT64),
             (ops.MAX, D.INT32, D.INT32, D.INT32), (ops.MIN, D.FLOAT32, D.FLOAT32, D.FLOAT32),
             (ops.ARGMAX, D.INT8, D.INT64, D.INT8), (ops.ALL, D.BOOL, D.BOOL, D.BOOL),
             (ops.CUMSUM, D.FLOAT32, D.FLOAT64, D.FLOAT64),
             (ops.CUMPROD, D.INT32, D.INT64, D.INT64)]
    for target, emit in _emitters().items():
        for op, code, dtype, acc in cases:
            if target == "c" and op is ops.ARGMAX:
                continue  # C walks the row in order from its first element: no start value
            source = emit(_row_spec(op, code, dtype, acc))
            assert "12345" in source, (target, op, source)
    from lazyrt.codegen.jax import emit_graph
    with lr.backend("numpy"):
        lr.cumulative_sum(lr.tensor(np.ones((2, 3), "float32")), axis=1,
                          include_initial=True).numpy()
    source, _ = emit_graph(lr.debug.last_record().graph, "g")
    assert "jnp.full((2, 1), 12345, jnp.float32)" in source, source
