"""The op table is the one place each op is defined: every stage reads it.

Adding a pointwise op without its lowerings, or a reduction without its
identity and accumulator, fails here; so does an emitter that silently
accepts a dtype its lowering cannot compute. Reductions accumulate in the
dtype the table says, on every backend, to one accuracy bound.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import dtypes as D
from lazyrt import ops
from lazyrt.planner import passes
from lazyrt.planner.kernel_ir import IndexMap, KernelInput, KernelOutput, KernelSpec, Stmt

POINTWISE = [op for op in ops.OPS if op.kind == ops.POINTWISE]
REDUCTIONS = [op for op in ops.OPS if op.kind == ops.REDUCTION]


def _emitters():
    from lazyrt.codegen.c import emit_c
    from lazyrt.lowering import EmitError as CError
    out = {"c": (emit_c, CError)}
    try:
        from lazyrt.codegen.triton import emit_triton
        from lazyrt.lowering import EmitError as TError
        out["triton"] = (emit_triton, TError)
    except ImportError:  # triton not installed: its emitter cannot be imported
        pass
    return out


def _operand_dtypes(op):
    """(operand dtype, result dtype) pairs the recorder can produce for ``op``."""
    if op is ops.CAST:
        return [(a, b) for a in range(D.NDTYPES) for b in range(D.NDTYPES) if a != b]
    if op is ops.WHERE:
        return [(c, c) for c in range(D.NDTYPES)]
    if op.arity == 1:
        return sorted({pair for pair in op.unary_table if pair[0] >= 0})
    arrays, with_scalars = op.binary_table
    return sorted({(comp, out) for table in (arrays, with_scalars) for row in table
                   for comp, out in row if comp >= 0})


def _one_op_spec(op, comp, out) -> KernelSpec:
    """One kernel computing ``op`` on loads of dtype ``comp``, after the planner's
    passes (float16 rounding), as every emitter receives it."""
    flat = IndexMap(0, (1,))
    if op is ops.WHERE:
        dtypes = (D.BOOL, comp, comp)
    else:
        dtypes = (comp,) * op.arity
    body = [Stmt(k, "load", dt, (), k) for k, dt in enumerate(dtypes)]
    attr = out if op is ops.CAST else None
    body.append(Stmt(len(body), op, out, tuple(range(len(dtypes))), attr))
    inputs = tuple(KernelInput(k, dt, flat) for k, dt in enumerate(dtypes))
    return passes.run(KernelSpec(f"k0_fused_{op.name}", (8,), (), inputs, (), tuple(body),
                                 (KernelOutput(len(dtypes), out, flat, len(body) - 1),),
                                 op.name))


def test_every_op_is_one_entry_with_a_unique_name_and_position():
    assert [op.id for op in ops.OPS] == list(range(len(ops.OPS)))
    assert len({op.name for op in ops.OPS}) == len(ops.OPS)
    for op in ops.OPS:
        assert op.kind in (ops.LEAF, ops.POINTWISE, ops.REDUCTION, ops.VIEW, ops.MATMUL,
                           ops.OPAQUE, ops.SCAN), op
        assert op.cost in (ops.CHEAP, ops.DIVIDES, ops.COSTLY), op


@pytest.mark.parametrize("op", POINTWISE, ids=str)
def test_every_pointwise_op_has_a_lowering_for_every_target(op):
    assert set(op.lower) >= set(ops.TARGETS), f"{op.name} lacks {set(ops.TARGETS) - set(op.lower)}"
    assert op.ref is not None


@pytest.mark.parametrize("op", POINTWISE, ids=str)
def test_every_emitter_lowers_every_dtype_of_an_op_or_refuses_it_by_name(op):
    for target, (emit, error) in _emitters().items():
        for comp, out in _operand_dtypes(op):
            spec = _one_op_spec(op, comp, out)
            try:
                kernel = emit(spec)
            except error as exc:
                assert op.name in str(exc) and D.NAMES[comp] in str(exc), (target, str(exc))
                assert comp not in D.FLOATING, f"{target} refused {op.name} on {D.NAMES[comp]}"
                continue
            assert "def " in kernel.source or "void " in kernel.source


def test_emitters_refuse_float16_math_the_passes_did_not_round():
    """float16 rounding is the planner's pass, not emitter code: a float16 op
    that reaches an emitter unrounded is refused, not silently left unrounded."""
    flat = IndexMap(0, (1,))
    body = (Stmt(0, "load", D.FLOAT16, (), 0), Stmt(1, ops.EXP, D.FLOAT16, (0,)))
    spec = KernelSpec("k0_fused_exp", (8,), (), (KernelInput(0, D.FLOAT16, flat),), (), body,
                      (KernelOutput(1, D.FLOAT16, flat, 1),))
    for target, (emit, error) in _emitters().items():
        with pytest.raises(error, match="passes"):
            emit(spec)
        rounded = passes.run(spec)
        assert [(st.op, st.dtype) for st in rounded.body[1:]] == [
            (ops.EXP, D.FLOAT32), (ops.CAST, D.FLOAT16)]
        emit(rounded)


@pytest.mark.parametrize("op", REDUCTIONS, ids=str)
def test_every_reduction_has_an_identity_and_an_accumulator(op):
    assert op.combine and op.identity and op.accumulator
    for code in range(D.NDTYPES):
        acc = op.accumulator(code)
        assert 0 <= acc < D.NDTYPES
        identity = op.identity(code)
        if op in (ops.SUM, ops.PROD):
            assert acc == (D.FLOAT64 if code in D.FLOATING else D.INT64)
            assert identity == (0 if op is ops.SUM else 1)
        if op in (ops.MAX, ops.ARGMAX) and code in D.FLOATING:
            assert identity == -np.inf


def test_reduce_statements_carry_the_op_tables_accumulator():
    from lazyrt import planner
    from lazyrt.graph import Graph
    x = lr.tensor(np.ones((4, 8), "float32"))
    t = x.sum(axis=1) + (x * 2).max(axis=1)
    graph = Graph.from_capture(__import__("lazyrt._capture", fromlist=["capture"])
                               .capture([t._node], 0))
    spec_reduces = [s for k in planner.plan(graph).kernels for s in k.body if s.op == "reduce"]
    assert {(s.attr, s.acc) for s in spec_reduces} == {("sum", D.FLOAT64), ("max", D.FLOAT32)}
    lr.sync()


def test_recorder_assumptions_about_the_tables_order_hold():
    # _recorder_pointwise.pyx tests comparisons as a range and int dtypes as 1..4
    cmp = [ops.EQ, ops.NE, ops.LT, ops.LE, ops.GT, ops.GE]
    assert [op.id for op in cmp] == list(range(ops.EQ.id, ops.EQ.id + 6))
    assert (D.BOOL, D.INT8, D.UINT8, D.INT32, D.INT64, D.FLOAT16) == tuple(range(6))
    assert D.NDTYPES == 9  # the recorders' ND (the import checks it too)
    assert D.BFLOAT16 == 8  # after the lattice: the other codes, in kernels and caches, stay


def _sum_bound_size(backend):
    # the Triton interpreter runs a kernel as NumPy calls per block: 2^24 would
    # take minutes; with a float64 accumulator the bound holds at any size
    return 1 << (24 if backend != "triton" or os.path.exists("/dev/nvidiactl") else 18)


def test_float32_sum_is_within_1e6_of_float64_on_every_backend(backend):
    n = _sum_bound_size(backend)
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    exact = x.astype(np.float64).sum()
    got = float(lr.tensor(x).sum().item())
    assert abs(got - exact) <= 1e-6 * abs(exact), (backend, got, exact)
    rows = x[: (n // 1024) * 1024].reshape(-1, 1024)
    got_rows = lr.tensor(rows).sum(axis=0).numpy()  # long columns: the outer-axis form
    exact_rows = rows.astype(np.float64).sum(axis=0)
    assert np.all(np.abs(got_rows - exact_rows) <= 1e-6 * np.abs(exact_rows) + 1e-30)
