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


# -- transposing pointwise kernels (codegen/c.py TILES) --

_TRANSPOSES = [((64, 4096), (1, 0)),        # stride 16 KB along the last axis: 8 x 128 tiles
               ((67, 4099), (1, 0)),        # odd sizes: partial tiles on both axes
               ((2048, 128), (1, 0)),       # 512 B: 16 x 16 tiles
               ((3, 40, 33), (0, 2, 1)),    # an outer axis beside the tile
               ((7, 3000), (1, 0)),         # a last axis under 16: the plain loops
               ((5, 16, 8, 64), (3, 1, 0, 2))]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8"])
@pytest.mark.parametrize("shape,axes", _TRANSPOSES)
def test_transposing_pointwise_kernels_match_numpy(backend, shape, axes, dtype):
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    y = rng.standard_normal(tuple(shape[a] for a in axes)[-1:]).astype(dtype) \
        if dtype != "int8" else np.int8(3)
    got = lr.permute_dims(lr.tensor(x), axes) * 2 + lr.tensor(y)
    assert_matches(got, np.transpose(x, axes) * 2 + y)


def test_transposing_kernels_are_tiled_and_attention_masks_tiled_only_on_aliasing():
    """A transpose (as many strided arrays as contiguous) runs in tiles; a kernel
    reading one transposed array among contiguous ones keeps its rows whole unless
    the stride aliases in L1 (a multiple of 4 KB), checked at run time."""
    def spec_of(out):
        graph = Graph.from_capture(capture([out._node], 0))
        (spec,) = planner.plan(graph).kernels
        return spec
    x = lr.tensor(np.ones((64, 4096), np.float32))
    source = emit_c(spec_of(lr.permute_dims(x, (1, 0)) * 2)).source
    assert "if (n0 >= 16 && n1 >= 16 && (lz_4k || (in0_s1 * (int64_t)sizeof(*in0) >= 64)))" \
        in source and "b0 += t0" in source and "lz_4k ? 8 : 16" in source
    rows = lr.tensor(np.ones((4096, 64), np.float32))
    source = emit_c(spec_of(rows + rows * 3 + lr.permute_dims(x, (1, 0)))).source
    assert "if (n0 >= 16 && n1 >= 16 && lz_4k) {" in source and "} else {" in source
    contiguous = emit_c(spec_of(rows * 2)).source
    assert "lz_4k" not in contiguous
    lr.sync()


def test_an_if_clause_on_a_combined_simd_construct_names_parallel():
    """``#pragma omp parallel for simd if(x)`` applies ``if`` to the simd
    construct too (OpenMP 5): a loop below the threshold ran one lane at a
    time. Every such pragma the C emitters write names the construct."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parent.parent / "codegen"
    pragmas = [line for f in sorted(root.glob("*.py")) for line in f.read_text().splitlines()
               if "omp" in line and "simd" in line and "if(" in line]
    found = [line for line in pragmas if re.search(r"if\((?!parallel:)", line)]
    assert not found, found
    # and what is emitted: a strided 1-D store takes the plain loop
    with lr.backend("c"):
        x = lr.asarray(np.arange(64, dtype=np.float32))
        y = lr.asarray(np.zeros(128, np.float32))
        y[::2] = x * 2.0
        lr.sync(y)
    np.testing.assert_array_equal(y.numpy()[::2], np.arange(64, dtype=np.float32) * 2)


def test_rereads_count_each_later_walk_over_the_row():
    """A layer norm written out (mean, variance, normalized store) walks its
    input's rows three times: two re-reads counted on top of bytes_moved; a
    plain row sum reads once."""
    from lazyrt.codegen.layout import reread_bytes, walks_reading

    def spec_of(out):
        graph = Graph.from_capture(capture([out._node], 0))
        (spec,) = planner.plan(graph).kernels
        return spec
    x = lr.tensor(np.ones((32, 100), np.float32))
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    norm = spec_of((x - mean) / lr.sqrt(var + 1e-5))
    assert walks_reading(norm) == {0: 3}
    assert reread_bytes(norm) == 2 * 32 * 100 * 4
    assert walks_reading(spec_of(x.sum(axis=1))) == {} == walks_reading(spec_of(x * 2))
    lr.sync()
