"""One layout per kernel, read by every emitter (``codegen/layout.py``).

The C and Triton emitters lay a reduction kernel out from the same
:class:`~lazyrt.codegen.layout.KernelLayout`: the passes over a row, which
outputs are stored once per row and which at every element, how scalars are
read. They used to lay it out each on its own, and disagreed on an output
whose address moves along a reduce axis of size 1.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyrt as lr
from conftest import assert_matches
from lazyrt import planner
from lazyrt._capture import capture
from lazyrt.codegen.c import emit_c
from lazyrt.codegen.layout import kernel_layout
from lazyrt.graph import Graph


def _size1_row_program(x):
    """max over an axis, a row value derived from it (stored: its shape fills
    the domain when the row has 1 element) and an element output after a
    second pass."""
    t = lr.tensor(x)
    m = t.max(axis=1, keepdims=True)
    return m * 2, t / m.sum(axis=1, keepdims=True)


def _numpy_size1_row_program(x):
    m = x.max(axis=1, keepdims=True)
    return m * 2, x / m.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("row", [1, 5])
def test_reduction_with_row_and_element_outputs_matches_numpy(backend, row):
    x = np.arange(1, 4 * row + 1, dtype=np.float32).reshape(4, row)
    got = _size1_row_program(x)
    for g, want in zip(got, _numpy_size1_row_program(x)):
        assert_matches(g, want)


def _planned_kernel(x):
    outs = _size1_row_program(x)
    graph = Graph.from_capture(capture([o._node for o in outs], 0))
    (spec,) = planner.plan(graph).kernels
    lr.sync()
    return spec


def test_a_row_value_stored_along_a_size1_reduce_axis_is_an_element_output():
    """Its stride on the reduce axis moves the address, whatever the axis's
    size: the source bakes strides, never sizes."""
    spec = _planned_kernel(np.ones((4, 1), np.float32))
    assert spec.reduce_axes == (1,) and spec.domain[1] == 1
    layout = kernel_layout(spec)
    row_value = [k for k, o in enumerate(spec.outputs) if not layout.elem[o.value]]
    assert row_value and spec.outputs[row_value[0]].index.strides[1] != 0
    assert layout.elem_outputs == (0, 1) and layout.row_outputs == ()
    assert [[st.attr for st in p] for p in layout.passes] == [["max"], ["sum"]]


def test_c_and_triton_lay_out_a_kernel_from_the_same_layout():
    emit_triton = pytest.importorskip("lazyrt.codegen.triton").emit_triton
    spec = _planned_kernel(np.ones((4, 1), np.float32))
    c, t = emit_c(spec).layout, emit_triton(spec).layout
    assert c == t == kernel_layout(spec)
