"""The Backend/Program protocol (lazyrt/backends/base.py) holds for every
backend, and backends run opaque steps through the one host implementation
(lazyrt/backends/host.py) instead of reaching into the op table."""
from __future__ import annotations

import inspect

import numpy as np

import lazyrt as lr
from lazyrt.backends import base, host
from lazyrt.graph import Graph
from lazyrt._capture import capture


def _graph_of(*tensors, salt=0):
    return Graph.from_capture(capture([t._node for t in tensors], salt))


def test_every_backend_and_its_programs_follow_the_protocol(backend):
    be = lr.backends.get(backend)
    assert isinstance(be, base.Backend)
    assert be.name == backend and be.device in ("cpu", "cuda") and isinstance(be.salt, int)
    x = lr.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    y = (x * 2).sum(axis=1)
    cap = capture([y._node], be.salt)
    program = be.compile(Graph.from_capture(cap))
    assert isinstance(program, base.Program)
    assert program.record.backend == backend and program.kernels == len(program.record.kernels)
    (out,) = program.run(cap.values)
    np.testing.assert_allclose(out, [6.0, 24.0])
    reported = []
    (again,) = program.run(cap.values, lambda name, s, nbytes: reported.append((name, nbytes)))
    np.testing.assert_allclose(again, out)
    assert [name for name, _ in reported] == [k.name for k in program.record.kernels]
    assert all(nbytes > 0 for _, nbytes in reported)
    y.numpy()  # leave nothing pending


def test_opaque_steps_have_a_kind_and_run_on_the_host(backend):
    x = lr.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    joined = lr.concat([x, x * 10], axis=0)
    np.testing.assert_array_equal(joined.numpy(), np.concatenate([np.arange(6.0).reshape(2, 3),
                                                                  np.arange(6.0).reshape(2, 3) * 10]))
    y = x + 0
    y[0, 1:] = lr.tensor(np.array([-1.0, -2.0], np.float32))
    np.testing.assert_array_equal(y.numpy(), [[0, -1, -2], [3, 4, 5]])
    names = [k.name for k in lr.debug.last_record().kernels]
    if backend in ("c", "triton"):  # planned backends run it as a host step
        assert "setslice" in names, names
    elif backend == "jax":  # the whole graph is one XLA computation, setslice inside it
        (kernel,) = lr.debug.last_record().kernels
        assert ".at[" in kernel.source and ".set(" in kernel.source, kernel.source


def test_an_opaque_step_says_its_kind_and_runs_on_the_host_from_it():
    from lazyrt.planner import OpaqueStep, plan
    x = lr.tensor(np.ones((2, 2), np.float32))
    steps = plan(_graph_of(lr.concat([x, x + 1], axis=1))).steps
    (step,) = [s for s in steps if isinstance(s, OpaqueStep)]
    assert step.kind == host.CONCAT and host.concat_axis(step) == 1
    assert not hasattr(step, "op")  # backends see steps, not the op table's entries
    out = host.run(step, [np.zeros((2, 2)), np.ones((2, 2))])
    assert out.shape == (2, 4)


def test_every_opaque_op_plans_to_a_kind_the_host_runs():
    from lazyrt import ops
    from lazyrt.planner import OpaqueStep, plan
    x = lr.tensor(np.zeros((2, 3), np.float32))
    y = x + 1
    y[0, 1:] = lr.tensor(np.array([-1.0, -2.0], np.float32))
    v = x.reshape(-1)
    moved = (lr.take(v, lr.asarray([2, 0])), lr.sort(x), lr.argsort(x),
             lr.searchsorted(v, x), lr.take_along_axis(x, lr.asarray([[1, 0, 1]]), axis=0),
             lr.index_add(x, lr.asarray([1]), x[:1]))
    steps = plan(_graph_of(lr.concat([x, x * 2], axis=0), y, *moved)).steps
    kinds = {s.kind for s in steps if isinstance(s, OpaqueStep)}
    assert kinds == {op.name for op in ops.OPS if op.kind == ops.OPAQUE} == set(host.KINDS)


def test_compiled_backends_do_not_reach_into_the_op_table():
    from lazyrt.backends import c, triton
    for module in (c, triton):
        text = inspect.getsource(module)
        assert ".ref(" not in text and '"concat"' not in text and "op.name" not in text, module


def test_hand_written_kernels_import_nothing_from_codegen():
    import os
    import lazyrt.kernels
    folder = os.path.dirname(lazyrt.kernels.__file__)
    for name in sorted(os.listdir(folder)):
        if name.endswith((".py", ".c", ".h")):
            with open(os.path.join(folder, name)) as f:
                assert "codegen" not in f.read(), name
