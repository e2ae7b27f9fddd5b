"""Shared fixtures, strategies and the comparison helper of the lazyrt suite.

Every numeric test takes the ``backend`` fixture: it is parametrized over
``lr.available_backends()`` and runs the test body inside
``with lr.backend(name):``, so a new backend (``c``, ``triton``) runs the same
specification as the ``numpy`` reference, and NumPy itself is the oracle.

Helpers are imported by test modules with ``from conftest import ...``.

``LAZYRT_TEST_BACKENDS=numpy,c`` restricts the backends under test;
``LAZYRT_TEST_BACKENDS=jax`` runs the suite on the (opt-in) jax backend.

Hypothesis profiles: ``default`` (15 examples, the CI budget) and
``thorough`` (300 examples); pick one with ``LAZYRT_HYPOTHESIS_PROFILE``.
"""
from __future__ import annotations

import gc
import os
import warnings

# The triton backend runs through Triton's interpreter where there is no GPU;
# it must be set before triton is first imported (backend discovery imports it).
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazyrt as lr
from lazyrt import _recorder, runtime
from lazyrt.backends.jax import request_exact_cpu_math

# Before any test starts JAX's CPU client (a bench peer, a test using jax.jit):
# the jax backend's NumPy-equal rounding needs XLA's flag at that start.
request_exact_cpu_math()

#: a dead xdist worker's fault-handler dump and peak memory, printed at the end
pytest_plugins = ["worker_deaths"]

# --- hypothesis --------------------------------------------------------------

_COMMON = dict(deadline=None, derandomize=False, print_blob=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("default", max_examples=15, **_COMMON)
settings.register_profile("thorough", max_examples=300, **_COMMON)
settings.register_profile("quick", max_examples=5, **_COMMON)
_PROFILE = os.environ.get("LAZYRT_HYPOTHESIS_PROFILE", "default")
settings.load_profile(_PROFILE)



def skip_deep_graph_on_jax(backend):
    """Skip a test that compiles one graph thousands of ops deep on the jax backend.

    XLA's CPU compiler (jaxlib 0.10.2) does not get through such graphs on small
    arrays: a plain ``jax.jit`` of a chain of ~510 adds on a float32[4] (lazyrt not
    involved) grows past 9 GiB and aborts with std::bad_alloc; with float32[1000]
    the same chain compiles in 1.1 s. The README's jax row says so."""
    if backend == "jax":
        pytest.skip("XLA's CPU compiler aborts on elementwise chains of ~500+ ops on "
                    "tiny arrays (reproduced with plain jax.jit)")


def pytest_collection_finish(session):
    """Freeze what collection imported (torch, its OpInfo database, triton, jax:
    ~500k objects) out of the garbage collector's reach. The ``backend`` fixture
    collects garbage before and after every test; a full collection over those
    objects cost ~0.3 s each time, most of the suite's run time."""
    gc.collect()
    gc.freeze()


def restore_hypothesis_profile():
    """Load the suite's hypothesis profile again.

    Importing ``torch.testing._internal`` loads torch's own profile, and
    ``@given`` keeps the profile current when a module is imported: every test
    module collected after it would silently lose our suppressed health
    checks and example counts. A module that imports it calls this next.
    """
    settings.load_profile(_PROFILE)

# --- fixtures ---------------------------------------------------------------


#: backends the shared suite runs only when named in ``LAZYRT_TEST_BACKENDS``:
#: XLA compiles each distinct graph in ~0.1 s, and the suite makes thousands
#: (``make test`` runs a fixed sample of files on ``jax``)
OPT_IN_BACKENDS = ("jax",)


def _test_backends() -> list[str]:
    """Every available backend but the opt-in ones, or the comma-separated
    ``LAZYRT_TEST_BACKENDS``."""
    chosen = os.environ.get("LAZYRT_TEST_BACKENDS")
    if not chosen:
        return [b for b in lr.available_backends() if b not in OPT_IN_BACKENDS]
    return [b.strip() for b in chosen.split(",") if b.strip()]


def _quarantine_pending() -> list[str]:
    """Compute every tensor a test left pending, one by one. One that cannot be
    computed (a backend bug, already reported by its own test) is replaced by
    zeros: otherwise it stays pending and fails every later barrier, including
    the ``lr.sync()`` that ``with lr.backend`` does on entry for the next test."""
    problems = []
    gc.collect()
    for t in _recorder.live_pending():
        try:
            lr.sync(t)
        except Exception as exc:  # noqa: BLE001 - reported, then neutralized
            problems.append(f"{t.shape} {t.dtype}: {exc!r}")
            t._node = _recorder.data_node(np.zeros(t.shape, t.dtype), t._node.dtype)
    return problems


@pytest.fixture(params=_test_backends())
def backend(request):
    """The backend name; the test body runs inside ``with lr.backend(name)``."""
    _quarantine_pending()
    with lr.backend(request.param):
        yield request.param
        problems = _quarantine_pending()
    if problems:
        warnings.warn(f"{request.node.nodeid} left tensors that {request.param!r} could not "
                      f"compute: {problems[:3]}", stacklevel=1)


@pytest.fixture
def fresh_metrics():
    """Metrics reset to zero (after syncing whatever an earlier test left pending)."""
    lr.sync()
    lr.metrics.reset()
    yield lr.metrics
    lr.metrics.reset()


@pytest.fixture
def empty_cache():
    """An empty program cache, so cache hits and misses are this test's alone."""
    lr.sync()
    runtime.program_cache.clear()
    yield runtime.program_cache


# --- dtypes -----------------------------------------------------------------

DTYPE_NAMES = ("bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64")
DTYPES = tuple(np.dtype(n) for n in DTYPE_NAMES)
FLOAT_DTYPES = tuple(np.dtype(n) for n in ("float16", "float32", "float64"))
#: every lazyrt dtype: DTYPES and bfloat16 (ml_dtypes'), which NumPy-only helpers lack
ALL_DTYPES = DTYPES + (lr.bfloat16,)
INT_DTYPES = tuple(np.dtype(n) for n in ("int8", "uint8", "int32", "int64"))

#: (rtol, atol) by result dtype, for results of arithmetic and transcendentals
TOLERANCES = {
    np.dtype("float16"): (2e-3, 1e-3),
    np.dtype("float32"): (2e-5, 1e-6),
    np.dtype("float64"): (1e-6, 1e-12),
    lr.bfloat16: (1.6e-2, 1e-2),  # 8 significant bits: one rounding is 2^-9 relative
}


#: NumPy result dtypes lazyrt does not have, and the documented dtype it uses instead
DEVIATIONS = {np.dtype("int16"): np.dtype("int32"),   # int8 op uint8
              np.dtype("uint64"): np.dtype("int64")}  # sum/prod of uint8


def lazyrt_dtype(numpy_dtype) -> np.dtype:
    """The dtype lazyrt gives where NumPy gives ``numpy_dtype``."""
    dt = np.dtype(numpy_dtype)
    return DEVIATIONS.get(dt, dt)


def _value_of(result):
    if isinstance(result, lr.Tensor):
        return result.numpy()
    return np.asarray(result)


def assert_matches(lazy_result, numpy_expected, dtype=None, rtol=None, atol=None):
    """``lazy_result`` (a Tensor, or an array it produced) equals NumPy's.

    * dtype: must equal ``dtype`` (default: the expected array's dtype, with
      the documented :data:`DEVIATIONS` applied);
    * shape must be equal;
    * ints and bools must be exactly equal;
    * floats: NaN positions must match exactly, infinities must match in
      position and sign, finite values within the dtype's tolerance
      (:data:`TOLERANCES`, or ``rtol``/``atol``).
    """
    actual = _value_of(lazy_result)
    expected = np.asarray(numpy_expected)
    want = np.dtype(dtype) if dtype is not None else lazyrt_dtype(expected.dtype)
    assert isinstance(actual, np.ndarray), f"expected an ndarray, got {type(actual)}"
    assert actual.dtype == want, f"dtype {actual.dtype} != expected {want}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
    if want.kind not in "f" and want != lr.bfloat16:  # ml_dtypes' bfloat16 is kind "V"
        np.testing.assert_array_equal(actual, expected.astype(want), strict=True)
        return
    exp = expected.astype(want)
    a64, e64 = actual.astype(np.float64), exp.astype(np.float64)
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    assert np.array_equal(nan_a, nan_e), (
        f"NaN positions differ:\n actual   {actual!r}\n expected {exp!r}")
    inf_a, inf_e = np.isinf(a64), np.isinf(e64)
    # a finite expected value close to the dtype's max may round to inf and back
    r, a = TOLERANCES[want]
    r = r if rtol is None else rtol
    a = a if atol is None else atol
    finite = ~(nan_e | inf_e | inf_a)
    both_inf = inf_a & inf_e
    assert np.array_equal(np.sign(a64[both_inf]), np.sign(e64[both_inf])), (
        f"infinity signs differ:\n actual   {actual!r}\n expected {exp!r}")
    lone_inf = inf_a ^ inf_e
    if lone_inf.any():
        # only allowed where the finite side is at the edge of the dtype's range
        big = float(lr.finfo(want).max) * (1 - 4 * r)
        other = np.where(inf_a, e64, a64)[lone_inf]
        assert np.all(np.abs(other) >= big), (
            f"infinity positions differ:\n actual   {actual!r}\n expected {exp!r}")
    np.testing.assert_allclose(a64[finite], e64[finite], rtol=r, atol=a,
                               err_msg=f"values differ ({want})")


def assert_exact(lazy_result, numpy_expected, dtype=None):
    """Bit-for-bit equality (NaN equal to NaN), for movement ops and exact arithmetic."""
    actual = _value_of(lazy_result)
    expected = np.asarray(numpy_expected)
    want = np.dtype(dtype) if dtype is not None else lazyrt_dtype(expected.dtype)
    assert actual.dtype == want, f"dtype {actual.dtype} != expected {want}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
    np.testing.assert_array_equal(actual, expected, strict=False)


def numpy_raises(fn, *args, **kwargs):
    """The exception type NumPy raises for ``fn(*args, **kwargs)``, or None."""
    try:
        with np.errstate(all="ignore"):
            fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - we report which one
        return type(exc)
    return None


def same_error_kind(exc: BaseException, numpy_error: type) -> bool:
    """``exc`` is of the broad kind NumPy raised (TypeError for a UFuncTypeError...)."""
    for kind in (OverflowError, TypeError, IndexError, ValueError):
        if issubclass(numpy_error, kind):
            return isinstance(exc, kind)
    return isinstance(exc, numpy_error)


def numpy_ref(fn, *args, **kw):
    with np.errstate(all="ignore"):
        return fn(*args, **kw)


# --- strategies ---------------------------------------------------------------

def shapes(min_dims=0, max_dims=4, min_side=0, max_side=6):
    """Shapes of rank 0..4 with sizes 0..6 (size-0 dims included)."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims,
                            min_side=min_side, max_side=max_side)


def broadcast_pairs(min_dims=0, max_dims=4, min_side=0, max_side=5):
    """Two shapes that broadcast together (and their result shape)."""
    return hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=min_dims,
                                             max_dims=max_dims, min_side=min_side,
                                             max_side=max_side)


def flushes_subnormals() -> bool:
    """The backend in use flushes subnormal floats to zero (XLA does, on CPU and
    TPU: the ``jax`` backend's one documented deviation from NumPy)."""
    return getattr(lr.backends.get(runtime.current_backend_name()), "flushes_subnormals", False)


def elements(dtype, special=True, small=False):
    """Element strategy per dtype; floats include NaN/inf/-0.0 when ``special``,
    and subnormals unless the backend in use flushes them."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return st.booleans()
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if small:
            return st.integers(max(info.min, -9), min(info.max, 9))
        return st.one_of(st.integers(max(info.min, -20), min(info.max, 20)),
                         st.integers(int(info.min), int(info.max)))
    width = dtype.itemsize * 8
    lim = 20.0 if small else (1e4 if width == 16 else 1e6)
    finite = st.floats(-lim, lim, width=width, allow_nan=False, allow_infinity=False,
                       allow_subnormal=not flushes_subnormals())
    if not special:
        return finite
    return st.one_of(finite, finite, finite,
                     st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 0.0]))


def arrays(dtype, shape, special=True, small=False):
    if np.dtype(dtype) == lr.bfloat16:  # hypothesis has no bfloat16: float32 values, rounded
        return hnp.arrays(np.float32, shape, elements=elements(np.float32, special, small)) \
            .map(lambda a: a.astype(lr.bfloat16))
    return hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype, special, small))


LAYOUTS = ("contiguous", "transposed", "reversed", "strided", "pending")


@st.composite
def lazy_inputs(draw, array, layout=None):
    """(lazy tensor, equal NumPy array): the tensor is built through a view.

    Layouts: a plain leaf, ``.T`` of a transposed copy, ``[::-1]`` of a
    reversed copy, ``[::2]`` of an interleaved copy, or a pending ``+ 0``
    expression — the same values reached by non-contiguous index maps.
    """
    layout = layout or draw(st.sampled_from(LAYOUTS))
    a = np.asarray(array)
    if a.ndim == 0 and layout in ("transposed", "reversed", "strided"):
        layout = "contiguous"
    if layout == "transposed":
        return lr.tensor(np.ascontiguousarray(a.T)).T, a
    if layout == "reversed":
        return lr.tensor(np.ascontiguousarray(a[::-1]))[::-1], a
    if layout == "strided":
        base = np.zeros((2 * a.shape[0],) + a.shape[1:], a.dtype)
        base[::2] = a
        if base.shape[0]:
            base[1::2] = a[::-1] if a.shape[0] else a
        return lr.tensor(base)[::2], a
    if layout == "pending":
        t = lr.tensor(a)
        return lr.where(lr.ones(a.shape, "bool"), t, t), a
    return lr.tensor(a), a
