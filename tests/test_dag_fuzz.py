"""A DAG fuzzer: random programs recorded lazily on every backend must match
the same ops evaluated one at a time on the ``numpy`` backend.

Hypothesis draws a program of 8-20 ops (4-12 under the Triton interpreter)
over a pool of values that starts with a few random leaves: broadcasting
binary ops (new leaves are made with compatible shapes when needed), Python
int and float scalars on either side (NEP 50: ``int32 * 0.5`` is float64),
unary ops including transcendentals on safe domains, ``where``, casts, views
(permute, reshape, slices with negative steps, integer indices,
broadcast_to, unsqueeze, squeeze), reductions over random axes with random
keepdims, and now and then a matmul. The oracle runs each op as it is drawn,
eagerly (a barrier after every op, on the ``numpy`` backend); the program is
then replayed on fresh leaves on the backend under test (``numpy``, ``c``,
``triton``: the ``backend`` fixture), several values synced as one graph.

Comparison: same shapes and dtypes; ints and bools exactly; floats with NaN
and inf in the same places and finite values within rtol 1e-4 (float16: 2e-3,
about two of its ulps; atol scaled by the output's magnitude). Discontinuous
ops (comparisons, floor, round, sign, argmax, float->int casts) are only
applied to *exact* values — leaves, views of them and integer arithmetic — so
a last-bit rounding difference between two correct backends cannot flip a
result. Float magnitudes are bounded (no op whose result could exceed 1e18 is
drawn), so float32 overflow cannot make correct backends disagree either. Bit-exact checks of every
dtype, in-place ops, copies and host writes: ``test_fuzz_semantics.py``.

Budget: 40 programs on ``numpy`` and ``c`` and 20 smaller ones on
``triton``; 400 and 100 under ``LAZYRT_HYPOTHESIS_PROFILE=thorough`` (the
count is stored as the ``random_programs`` property). Shrinking is off (each
candidate recompiles: minutes) unless ``LAZYRT_FUZZ_SHRINK=1``; a failure
always shows the program as a listing (``v3 = add(v1, v2) {...}``). All
examples share one C kernel cache folder, so a kernel seen before is loaded.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st

import lazyrt as lr
from lazyrt import backends as B
from lazyrt.backends.c_compiler import CCompiler

THOROUGH = os.environ.get("LAZYRT_HYPOTHESIS_PROFILE") == "thorough"
#: (programs, fewest ops, most ops, large leaves) per backend; Triton is interpreted on CPUs
BUDGET = {"triton": (100 if THOROUGH else 20, 4, 12, False)}
DEFAULT_BUDGET = (400 if THOROUGH else 40, 8, 20, True)
# Shrinking replans and recompiles every candidate (minutes): off unless asked
# for; a failure prints the drawn program's listing either way.
PHASES = tuple(Phase) if os.environ.get("LAZYRT_FUZZ_SHRINK") else \
    (Phase.explicit, Phase.reuse, Phase.generate)
FLOAT_BOUND = 1e18
INT_BOUND = {np.dtype("int32"): 2 ** 30, np.dtype("int64"): 2 ** 62}


@pytest.fixture(scope="module", autouse=True)
def shared_kernel_cache(tmp_path_factory):
    """One private C kernel cache for every example of this module (the c
    backend object is process-wide, so its compiler is swapped, not the env)."""
    if "c" not in lr.available_backends():
        yield None
        return
    backend = B.get("c")
    compiler = CCompiler(cache_dir=str(tmp_path_factory.mktemp("fuzz-kernels")))
    compiler.flags = backend.compiler.flags
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backend, "compiler", compiler)
        yield compiler


# --- the program ---------------------------------------------------------------


def _apply(op, args, p):
    """The op ``op`` on tensors ``args`` with parameters ``p`` (shared by both runs)."""
    a = args[0] if args else None
    b = args[1] if len(args) > 1 else p.get("scalar")
    if p.get("reflected") and op in ("add", "sub", "mul"):
        a, b = b, a  # `2.5 - x`: the scalar on the left
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "maximum":
        return lr.maximum(a, b)
    if op == "minimum":
        return lr.minimum(a, b)
    if op == "safe_div":
        return a / (lr.abs(b) + 1) if not isinstance(b, (int, float)) else a / (abs(b) + 1)
    if op == "floor_divide":
        return lr.floor_divide(a, lr.remainder(b, 5) + 1)
    if op == "remainder":
        return lr.remainder(a, lr.remainder(b, 7) + 1)
    if op in ("bitwise_and", "bitwise_or", "bitwise_xor", "less", "greater", "equal",
              "less_equal", "not_equal", "logical_and", "logical_or"):
        return getattr(lr, op)(a, b)
    if op == "where":
        return lr.where(a, args[1], args[2] if len(args) > 2 else p["scalar"])
    # unary
    if op == "neg":
        return -a
    if op == "abs":
        return lr.abs(a)
    if op == "exp":
        return lr.exp(lr.clip(a, -20, 20))
    if op == "expm1":
        return lr.expm1(lr.clip(a, -10, 10))
    if op == "log1p_abs":
        return lr.log1p(lr.abs(a))
    if op == "log_abs":
        return lr.log(lr.abs(a) + 0.5)
    if op == "sqrt_abs":
        return lr.sqrt(lr.abs(a))
    if op == "rsqrt":
        return lr.rsqrt(lr.abs(a) + 1)
    if op in ("tanh", "sigmoid", "erf", "square", "floor", "ceil", "round", "sign",
              "isnan", "logical_not"):
        return getattr(lr, op)(a)
    if op == "sin":
        return lr.sin(lr.clip(a, -100, 100))
    if op == "cos":
        return lr.cos(lr.clip(a, -100, 100))
    if op == "relu":
        return lr.nn.relu(a)
    if op == "gelu":
        return lr.nn.gelu(a)
    if op == "cast":
        return a.astype(p["dtype"])
    # views
    if op == "permute":
        return a.permute(*p["axes"])
    if op == "reshape":
        return a.reshape(p["shape"])
    if op == "getitem":
        return a[p["index"]]
    if op == "broadcast_to":
        return lr.broadcast_to(a, p["shape"])
    if op == "unsqueeze":
        return a.unsqueeze(p["axis"])
    if op == "squeeze":
        return a.squeeze(p["axis"])
    # reductions
    if op in ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "any", "all",
              "logsumexp"):
        return getattr(lr, op)(a, p["axis"], p["keepdims"])
    if op in ("var", "std"):
        return getattr(lr, op)(a, p["axis"], p["keepdims"], correction=p.get("correction", 0))
    if op == "softmax":
        return lr.nn.softmax(a, axis=p["axis"])
    if op == "matmul":
        return a @ args[1]
    raise AssertionError(op)


@dataclass
class Value:
    t: object                 # the lazy tensor in the numpy-backend run
    exact: bool               # equal bit for bit on every correct backend
    bound: float              # an upper bound of |value| (NaN aside)
    may_nan: bool

    @property
    def dtype(self):
        return np.dtype(self.t.dtype)

    @property
    def shape(self):
        return tuple(self.t.shape)

    @property
    def is_float(self):
        return self.dtype.kind == "f"


@dataclass
class Program:
    leaves: list               # numpy arrays
    steps: list                # ("leaf", k) or (op, arg indices, params)
    outputs: list              # pool indices synced together

    def listing(self) -> str:
        lines = []
        for i, s in enumerate(self.steps):
            if s[0] == "leaf":
                a = self.leaves[s[1]]
                lines.append(f"v{i} = leaf {a.dtype}{list(a.shape)}")
            else:
                op, args, p = s
                lines.append(f"v{i} = {op}({', '.join(f'v{j}' for j in args)}) {p}")
        lines.append(f"sync {', '.join(f'v{j}' for j in self.outputs)}")
        return "\n".join(lines)


def replay(program: Program):
    """Record ``program`` on fresh leaves; returns the output tensors (pending)."""
    vals = []
    for s in program.steps:
        if s[0] == "leaf":
            vals.append(lr.tensor(program.leaves[s[1]]))
        else:
            op, args, p = s
            vals.append(_apply(op, [vals[j] for j in args], p))
    return [vals[j] for j in program.outputs]


# --- drawing a program ------------------------------------------------------------

LEAF_DTYPES = ["float32"] * 10 + ["float64", "int32", "int32", "int64", "bool", "bool", "int8",
                                   "uint8"]
FLOAT_SCALARS = [0.5, -1.5, 2.0, 3.0, 0.1, 1 / 3, -0.0]
INT_SCALARS = [2, -3, 1, True]
FLOAT_BINARY = ["add", "sub", "mul", "maximum", "minimum", "safe_div"]
INT_BINARY = ["add", "sub", "mul", "maximum", "minimum", "floor_divide", "remainder",
              "bitwise_and", "bitwise_xor"]
COMPARE = ["less", "greater", "equal", "less_equal", "not_equal"]
FLOAT_UNARY = ["neg", "abs", "exp", "expm1", "log1p_abs", "log_abs", "sqrt_abs", "rsqrt",
               "tanh", "sigmoid", "erf", "sin", "cos", "relu", "gelu", "square"]
EXACT_UNARY = ["floor", "ceil", "round", "sign", "isnan"]


class Drawer:
    def __init__(self, data, large_leaves=True):
        self.data, self.large_leaves = data, large_leaves
        self.rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
        self.pool: list[Value] = []
        self.prog = Program([], [], [])

    def draw(self, strategy, label=None):
        return self.data.draw(strategy, label=label)

    def choice(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    # values
    def add_value(self, step, tensor, exact, bound, may_nan):
        lr.sync(tensor)  # the oracle is eager: each op runs alone, as it is drawn
        self.prog.steps.append(step)
        self.pool.append(Value(tensor, exact, bound, may_nan))
        return len(self.pool) - 1

    def new_leaf(self, shape, dtype=None):
        dtype = np.dtype(dtype or self.choice(LEAF_DTYPES))
        rng = self.rng
        if dtype.kind == "f":
            a = rng.uniform(-3, 3, shape)
            if rng.random() < 0.3:
                a = np.round(a * 2) / 2      # ties for argmax, equal and round
            may_nan = bool(rng.random() < 0.15) and a.size > 0
            if may_nan:
                a.flat[rng.integers(0, a.size, max(1, a.size // 5))] = np.nan
            a, bound = a.astype(dtype), 3.0
        elif dtype.kind == "b":
            a, bound, may_nan = rng.random(shape) < 0.5, 1.0, False
        else:
            a = rng.integers(0 if dtype == np.uint8 else -20, 21, shape)
            a, bound, may_nan = a.astype(dtype), 20.0, False
        if dtype.kind != "f":
            may_nan = False
        self.prog.leaves.append(np.array(a, order="C"))  # 0-d stays 0-d
        return self.add_value(("leaf", len(self.prog.leaves) - 1), lr.tensor(a), True,
                              bound, may_nan)

    def leaf_shape(self):
        rank = self.draw(st.integers(0, 3))
        shape = [self.draw(st.integers(1, 5)) for _ in range(rank)]
        if rank and self.large_leaves and self.draw(st.integers(0, 9)) == 0:
            shape[-1] = self.choice([64, 257])        # a longer row
            if rank > 1 and self.draw(st.booleans()):
                shape[0] = 160                       # large enough for OpenMP threads
        return tuple(shape)

    def pick(self, pred=lambda v: True):
        idx = [i for i, v in enumerate(self.pool) if pred(v)]
        if not idx:
            return None
        return self.choice(idx[::-1])  # shrinks toward the newest

    def record(self, op, args, params, exact, bound, may_nan):
        """Apply op on the numpy run; returns the new index or None if the op is
        refused at record time (the same refusal happens on the replay)."""
        if bound is not None and not (bound <= FLOAT_BOUND):
            return None
        try:
            t = _apply(op, [self.pool[j].t for j in args], params)
        except (lr.LazyrtError, TypeError, ValueError, IndexError, OverflowError):
            return None
        if np.dtype(t.dtype).kind in "iu" and np.dtype(t.dtype).itemsize == 1:
            bound = 255.0  # int8 and uint8 wrap around (as NumPy does): any value
        elif np.dtype(t.dtype).kind in "iu":
            if bound is None or bound > INT_BOUND[np.dtype(t.dtype)]:
                return None
        elif np.dtype(t.dtype).kind == "b":
            bound = 1.0
        return self.add_value((op, tuple(args), params), t, exact, bound, may_nan)

    # op families
    def partner(self, a):
        """A value broadcast-compatible with pool[a] (maybe a new leaf)."""
        shape = self.pool[a].shape
        ok = [i for i, v in enumerate(self.pool) if _broadcastable(v.shape, shape)]
        if ok and self.draw(st.integers(0, 3)):
            return self.choice(ok[::-1])
        # a new leaf: drop some leading dims, set some dims to 1
        keep = self.draw(st.integers(0, len(shape)))
        new = [d if self.draw(st.booleans()) else 1 for d in shape[len(shape) - keep:]]
        if self.draw(st.integers(0, 4)) == 0:
            new = [self.draw(st.integers(1, 3))] + [1] * len(shape)  # a new leading axis
        return self.new_leaf(tuple(new))

    def binary(self):
        a = self.pick()
        va = self.pool[a]
        use_scalar = self.draw(st.integers(0, 3)) == 0
        if use_scalar:  # a weak Python scalar (NEP 50), on either side
            scalar = self.choice(FLOAT_SCALARS if va.is_float or self.draw(st.booleans())
                                 else INT_SCALARS)
            nb = {"scalar": scalar, "reflected": self.draw(st.booleans())}
            # an int tensor with a float scalar is a float64 result, rounded
            exact_b = va.is_float or type(scalar) is not float
            args, sb, exact_b, nan_b = [a], abs(scalar), exact_b, False
        else:
            b = self.partner(a)
            vb = self.pool[b]
            args, sb, nb, exact_b, nan_b = [a, b], vb.bound, {}, vb.exact, vb.may_nan
        exact = va.exact and exact_b
        may_nan = va.may_nan or nan_b
        kind = self.draw(st.integers(0, 9))
        if kind < 2 and exact:
            op = self.choice(COMPARE)
            return self.record(op, args, nb, True, 1.0, False)
        other_int = type(nb["scalar"]) is not float if use_scalar else \
            self.pool[args[1]].dtype.kind in "iub"
        op = self.choice(INT_BINARY if va.dtype.kind in "iub" and other_int else FLOAT_BINARY)
        bound = {"add": va.bound + sb, "sub": va.bound + sb, "mul": va.bound * sb,
                 "maximum": max(va.bound, sb), "minimum": max(va.bound, sb),
                 "safe_div": va.bound, "floor_divide": va.bound, "remainder": 7.0,
                 "bitwise_and": max(va.bound, sb) * 2, "bitwise_xor": max(va.bound, sb) * 2,
                 }[op]
        keeps_exact = op in ("maximum", "minimum") or (
            op in ("add", "sub", "mul", "floor_divide", "remainder", "bitwise_and",
                   "bitwise_xor") and va.dtype.kind in "iub")
        return self.record(op, args, nb, exact and keeps_exact, bound, may_nan)

    def unary(self):
        a = self.pick()
        va = self.pool[a]
        if va.dtype.kind == "b":
            return self.record("logical_not", [a], {}, True, 1.0, False)
        if va.exact and self.draw(st.integers(0, 3)) == 0:
            op = self.choice(EXACT_UNARY if va.is_float else ["sign", "neg", "abs"])
            return self.record(op, [a], {}, True, va.bound + 1, va.may_nan and op != "isnan")
        op = self.choice(FLOAT_UNARY)
        b = va.bound
        bound = {"neg": b, "abs": b, "exp": math.exp(min(b, 20)), "expm1": math.exp(min(b, 10)),
                 "log1p_abs": math.log1p(b), "log_abs": max(math.log(b + 0.5), 1.0),
                 "sqrt_abs": math.sqrt(b), "rsqrt": 1.0, "tanh": 1.0, "sigmoid": 1.0,
                 "erf": 1.0, "sin": 1.0, "cos": 1.0, "relu": b, "gelu": b + 1,
                 "square": b * b}[op]
        exact = va.exact and op in ("neg", "abs", "relu")
        return self.record(op, [a], {}, exact, bound, va.may_nan)

    def where(self):
        c = self.pick(lambda v: v.dtype.kind == "b")
        if c is None:
            return self.binary()
        a = self.partner(c)
        if self.draw(st.booleans()):
            b = self.partner(c)
            args, params, vb = [c, a, b], {}, self.pool[b]
            bb, eb, nb = vb.bound, vb.exact, vb.may_nan
        else:
            args, params, bb, eb, nb = [c, a], {"scalar": 0.0 if self.pool[a].is_float else 0}, \
                0.0, True, False
        va = self.pool[a]
        return self.record("where", args, params, va.exact and eb, max(va.bound, bb),
                           va.may_nan or nb)

    def cast(self):
        a = self.pick()
        va = self.pool[a]
        targets = ["float32", "float64", "bool"]
        if va.dtype.kind in "iub" or (va.exact and not va.may_nan and va.bound < 2 ** 30):
            targets += ["int32", "int64"]
        dtype = self.choice(targets)
        exact = va.exact or dtype in ("float32", "float64") and va.dtype.kind in "iub"
        if va.dtype.kind == "f" and dtype == "bool" and not va.exact:
            return None  # x != 0 on a rounded value may flip
        if va.dtype == np.float64 and dtype == "float32":
            exact = False
        return self.record("cast", [a], {"dtype": dtype}, exact, va.bound,
                           va.may_nan and dtype.startswith("float"))

    def view(self):
        a = self.pick()
        va = self.pool[a]
        shape, rank = va.shape, len(va.shape)
        kind = self.choice(["permute", "reshape", "getitem", "broadcast_to", "unsqueeze",
                            "squeeze"])
        if kind == "permute" and rank >= 2:
            params = {"axes": tuple(self.draw(st.permutations(range(rank))))}
        elif kind == "reshape":
            params = {"shape": self.reshape_target(shape)}
        elif kind == "getitem" and rank >= 1:
            params = {"index": self.index(shape)}
        elif kind == "broadcast_to":
            lead = [self.draw(st.integers(1, 3)) for _ in range(self.draw(st.integers(0, 2)))]
            target = lead + [self.draw(st.integers(1, 4)) if d == 1 else d for d in shape]
            params = {"shape": tuple(target)}
        elif kind == "squeeze" and 1 in shape:
            ones = [i for i, d in enumerate(shape) if d == 1]
            params = {"axis": self.choice([None] + ones + [i - rank for i in ones])}
        else:
            kind, params = "unsqueeze", {"axis": self.draw(st.integers(-rank - 1, rank))}
        return self.record(kind, [a], params, va.exact, va.bound, va.may_nan)

    def reshape_target(self, shape):
        size = int(np.prod(shape))
        factors = _prime_factors(size)
        rank = self.draw(st.integers(1, 4))
        dims = [1] * rank
        for f in factors:
            dims[self.draw(st.integers(0, rank - 1))] *= f
        if size > 1 and self.draw(st.integers(0, 4)) == 0:
            dims[self.draw(st.integers(0, rank - 1))] = -1
        return tuple(dims)

    def index(self, shape):
        idx = []
        for d in shape:
            k = self.draw(st.integers(0, 5))
            if k == 0:
                idx.append(self.draw(st.integers(-d, d - 1)))
            elif k == 1:
                idx.append(slice(None))
            else:
                step = self.choice([1, 2, 3, -1, -2])
                start = self.draw(st.integers(0, d - 1))
                stop = self.draw(st.integers(0, d))
                if step > 0 and stop <= start:
                    stop = d
                if step < 0:
                    idx.append(slice(start, None if stop >= start else stop, step))
                else:
                    idx.append(slice(start, stop, step))
        return tuple(idx)

    def reduction(self):
        a = self.pick(lambda v: len(v.shape) >= 1)
        if a is None:
            return self.unary()
        va = self.pool[a]
        rank = len(va.shape)
        keepdims = self.draw(st.booleans())
        form = self.draw(st.integers(0, 3))
        if form == 0:
            axis = None
        elif form == 1:
            axis = self.draw(st.integers(-rank, rank - 1))
        else:
            axes = self.draw(st.lists(st.integers(0, rank - 1), min_size=1, unique=True))
            axis = tuple(ax - rank if self.draw(st.booleans()) else ax for ax in axes)
        n = _count(va.shape, axis)
        if va.dtype.kind == "b":
            op = self.choice(["any", "all", "sum"])
            return self.record(op, [a], {"axis": axis, "keepdims": keepdims}, True,
                               float(n), False)
        ops = ["sum", "mean", "max", "min", "var", "std"]
        if va.is_float:
            ops += ["logsumexp", "softmax"]
        if n <= 8 and _power_bound(va.bound, n) <= FLOAT_BOUND:
            ops.append("prod")
        if va.exact and (axis is None or isinstance(axis, int)):
            ops += ["argmax", "argmin"]
        op = self.choice(ops)
        params = {"axis": axis, "keepdims": keepdims}
        b = va.bound
        bound = {"sum": b * n, "mean": b, "max": b, "min": b, "var": b * b * 4,
                 "std": 2 * b, "logsumexp": b + math.log(n + 1), "softmax": 1.0,
                 "prod": _power_bound(b, n), "argmax": float(n), "argmin": float(n)}[op]
        if op == "softmax":
            if not isinstance(axis, int):
                return None
            params = {"axis": axis}
        if op in ("var", "std") and n > 1 and self.draw(st.booleans()):
            params["correction"] = 1
        exact = op in ("max", "min", "argmax", "argmin") and va.exact or \
            op in ("sum", "prod") and va.dtype.kind in "iu"
        return self.record(op, [a], params, exact, bound, va.may_nan)

    def matmul(self):
        a = self.pick(lambda v: v.is_float and len(v.shape) >= 1 and v.shape[-1] <= 64)
        if a is None:
            return self.binary()
        va = self.pool[a]
        k = va.shape[-1]
        n = self.draw(st.integers(1, 5))
        w_shape = (k, n) if self.draw(st.integers(0, 3)) else (k,)
        w = self.new_leaf(w_shape, "float32")
        return self.record("matmul", [a, w], {}, False, va.bound * 3 * k,
                           va.may_nan or self.pool[w].may_nan)

    def program(self, fewest=8, most=20) -> Program:
        for _ in range(self.draw(st.integers(1, 3))):
            self.new_leaf(self.leaf_shape())
        n_ops = self.draw(st.integers(fewest, most), label="n_ops")
        families = [self.binary] * 6 + [self.unary] * 4 + [self.view] * 5 + \
            [self.reduction] * 3 + [self.where, self.cast, self.matmul]
        made = 0
        for _ in range(4 * n_ops):
            if made >= n_ops:
                break
            if self.choice(families)() is not None:
                made += 1
        last = len(self.pool) - 1
        others = self.draw(st.lists(st.integers(0, last), max_size=3, unique=True))
        self.prog.outputs = [last] + [o for o in others if o != last]
        return self.prog


MAX_ELEMENTS = 60_000


def _broadcastable(a, b):
    """a and b broadcast together, to a result of modest size."""
    try:
        return int(np.prod(np.broadcast_shapes(a, b))) <= MAX_ELEMENTS
    except ValueError:
        return False


def _power_bound(b, n):
    try:
        return float(b) ** n
    except OverflowError:
        return math.inf


def _prime_factors(n):
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _count(shape, axis):
    if axis is None:
        return int(np.prod(shape))
    axes = (axis,) if isinstance(axis, int) else axis
    return int(np.prod([shape[a] for a in axes]))


# --- comparison --------------------------------------------------------------------


def assert_same(got, want, where):
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=where, strict=True)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{where}: NaN positions differ\n{g}\n{w}"
    assert np.array_equal(np.isposinf(g), np.isposinf(w)) and \
        np.array_equal(np.isneginf(g), np.isneginf(w)), f"{where}: infinities differ\n{g}\n{w}"
    finite = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[finite]), initial=0.0)))
    # float16's ulp is ~1e-3 of the value: a transcendental one float32 ulp apart
    # (XLA's and NumPy's differ) can round to the neighbouring float16
    tol = 2e-3 if want.dtype == np.float16 else 1e-4
    np.testing.assert_allclose(g[finite], w[finite], rtol=tol, atol=tol * scale,
                               err_msg=where)


def test_random_dag_matches_eager_numpy(backend, record_property):
    programs, fewest, most, large_leaves = BUDGET.get(backend, DEFAULT_BUDGET)
    count = []

    @settings(max_examples=programs, deadline=None, phases=PHASES)
    @given(st.data())
    def one_program(data):
        count.append(1)
        # barriers name their tensors: a failed example's leftovers must not fail this one
        with lr.backend("numpy"):
            drawer = Drawer(data, large_leaves)
            program = drawer.program(fewest, most)
            note(program.listing())
            expected = [drawer.pool[j].t.numpy() for j in program.outputs]
            del drawer
        try:
            got = replay(program)
            lr.sync(*got)
            got = [g.numpy() for g in got]
        except Exception:
            # printed, not only noted: when hypothesis then reports the example as
            # flaky (its replay drew differently), the captured output still has it
            print(f"{backend} failed on this program:\n{program.listing()}", file=sys.stderr)
            raise
        for k, (g, w) in enumerate(zip(got, expected)):
            assert_same(g, w, f"output {k} (v{program.outputs[k]}) on {backend}")

    one_program()
    record_property("random_programs", len(count))
