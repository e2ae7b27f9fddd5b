"""Each recorded node remembers the user's line that recorded it (for kernel
comments, the compile record and the CLI), never a line inside lazyrt."""
from __future__ import annotations

import inspect

import numpy as np

import lazyrt as lr


def _line_here(offset=0):
    frame = inspect.currentframe().f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno + offset}"


def test_an_operator_records_the_users_line():
    x = lr.tensor(np.ones(4))
    y = x * 2 + 1; where = _line_here()  # noqa: E702 - same line on purpose
    assert y._node.source == where
    assert y._node.inputs[0].source == where


def test_a_lazyrt_function_records_the_caller_not_lazyrt():
    x = lr.tensor(np.ones((2, 3), "float32"))
    p = lr.nn.softmax(x, axis=-1); where = _line_here()  # noqa: E702
    nodes, stack = [], [p._node]
    while stack:  # every op softmax recorded inside lazyrt/api/nn.py
        n = stack.pop()
        if not n.is_leaf:
            nodes.append(n)
            stack.extend(n.inputs)
    assert len(nodes) > 3
    assert {n.source for n in nodes} == {where}


def test_a_users_helper_function_is_the_line_inside_it():
    def helper(t):
        return t.exp()

    line = inspect.getsourcelines(helper)[1] + 1
    y = helper(lr.tensor(np.ones(3)))
    assert y._node.source == f"{__file__}:{line}"


def test_leaves_have_no_source_and_computed_nodes_keep_theirs(backend):
    x = lr.tensor(np.ones(3))
    assert x._node.source is None
    y = x + 1; where = _line_here()  # noqa: E702
    y.numpy()
    assert y._node.source == where


def test_torch_ops_record_the_users_line_not_torchs():
    """Through ``lazyrt.torch``, torch's own modules are not the user's code: a
    Linear layer's nodes name the line that called the model, its backward's
    nodes the ``backward()`` line (not ``torch/nn/modules/linear.py`` or
    ``torch/autograd/graph.py``)."""
    torch = __import__("pytest").importorskip("torch")
    import lazyrt.torch as lt

    model = lt.lazy(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU()))
    x = torch.ones(4, 3).to("lazy")
    out = model(x); forward = _line_here()  # noqa: E702
    out.sum().backward(); backward = _line_here()  # noqa: E702
    inner = torch._from_functional_tensor(out)
    assert inner.value._node.source == forward
    grad = torch._from_functional_tensor(model[0].weight.grad)
    assert grad.value._node.source == backward
    lt.mark_step()
