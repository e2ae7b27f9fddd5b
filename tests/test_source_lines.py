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
