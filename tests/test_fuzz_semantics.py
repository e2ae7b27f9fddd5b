"""Random programs over every dtype, checked bit for bit against eager NumPy.

Each example draws a straight-line program and runs every statement twice
as it is drawn: on lazyrt, where it is recorded and computed at the barriers
on the backend under test, and on NumPy arrays, eagerly, with a copy made at
every view. That copy is lazyrt's value semantics (README: "Views have value
semantics"): ``y = x[:]; y += 1`` must leave ``x`` alone. A program mixes

* leaves of all eight dtypes fed by ``lr.asarray(h)``, ``lr.tensor(h)``,
  ``lr.asarray(h[::2])`` and ``lr.asarray`` of a read-only view of ``h``; the
  host arrays ``h`` are written to afterwards, while the tensors made from
  them are still pending: results must be those of the data at the call;
* binary operators with Python bool/int/float scalars on either side, on
  every dtype, following NEP 50 (``float16_tensor * 0.1`` is float16,
  ``uint8_tensor + 300`` raises, ``int8_tensor == 300`` compares by value),
  with float values just above float16 rounding ties;
* casts, views (``x[1:]``, ``x[:, ::2]``, ``x.T``...) and copies (``x[:]``,
  ``x[0:]``, ``x[...]``, ``lr.reshape(x, x.shape)``, ``lr.astype(x, x.dtype)``,
  ``lr.asarray(x, copy=True)``), then in-place operators (``+=``...) and
  ``x[idx] = v`` on the copy, the view or the original;
* barriers in the middle (``v.numpy()``), and one for all values at the end.

Where NumPy raises, lazyrt must raise the same kind of error, at record time.
Every value is compared bit for bit (NaN with NaN, the sign of zero too),
its dtype and shape at record time. Not drawn, as NumPy's result is not a
contract there: int32/int64 overflow, float to int conversions of NaN, inf
or out-of-range values, and ``bool ** 2`` (NumPy's operator computes it as
``np.square``, int8, where ``np.power`` gives int64). lazyrt's documented
dtype deviation (int8 with uint8 gives int32, not int16) is applied to
NumPy's result.

A program ends with the cases these tests exist for, where its random part
lacked them (a barrier, a write to a copy, to its source, to a view, to a
host array after ``lr.asarray``, float16 with a Python float, a float
narrowed to float16, a scalar op on each dtype), and each test asserts that
they ran.
A failure prints the program as Python code; ``LAZYRT_FUZZ_SHRINK=1``
shrinks it first (slow on ``c``: every candidate compiles).

Random programs per run (``default`` profile; ``thorough`` runs 12 times
more): 25 on ``numpy`` and ``c`` and 16 on ``triton`` (interpreted on CPUs),
with up to 16 (10) random statements each, plus one long chain of 2000
(1000) statements per backend (12 under ``thorough``); the count of short
programs is stored as the ``random_programs`` property.
"""
from __future__ import annotations

import math
import os
import warnings
from collections import Counter

import numpy as np
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st

import lazyrt as lr
from lazyrt import runtime
from conftest import DTYPE_NAMES, lazyrt_dtype, same_error_kind

# the Python scalars drawn; out-of-range ints and tie-breaking floats included
SCALARS = [True, False, 0, 1, 2, 3, -1, -7, 100, 127, 255, 300, -129, 2 ** 31, -2 ** 40,
           0.0, -0.0, 0.1, 0.5, -1.5, 2.5, 1 / 3, 1e-3, 3.0, 1e5, 1e-8, 65504.0,
           1 + 2 ** -11 + 2 ** -30,  # a float16 tie in float32, above it in float64
           math.nan, math.inf, -math.inf]
#: just above a float16 rounding tie, which rounding through float32 would hide
F16_TIES = [1 + 2 ** -11 + 2 ** -30, 2049.0000001, -(0.5 + 2 ** -12 + 2 ** -35)]
ARITH = ["+", "-", "*", "/", "//", "%"]
DIVISIONS = ("/", "//", "%")
BITWISE = ["&", "|", "^"]
COMPARE = ["==", "!=", "<", "<=", ">", ">="]
VIEWS = ["{}[1:]", "{}[:, ::2]", "{}.T", "{}[::-1]", "{}[-1]", "{}[None]", "{}.reshape(-1)",
         "{}[..., 1]"]
COPIES = ["{}[:]", "{}[0:]", "{}[...]", "lr.reshape({0}, {0}.shape)", "lr.astype({0}, {0}.dtype)",
          "lr.asarray({}, copy=True)", "{0}.astype({0}.dtype)"]
FEEDS = ["lr.asarray({})", "lr.tensor({})", "lr.asarray({}, copy=True)", "lr.asarray({}[::2])",
         "lr.asarray(_readonly({}))"]
#: what every test run must have done at least once (counted per backend)
REQUIRED = ("write to a copy", "write to the source of a copy", "write to a view",
            "host write after asarray", "float16 with a Python float",
            "float16 compared with a Python float", "float narrowed to float16",
            "barrier mid-program",
            *(f"scalar with {d}" for d in DTYPE_NAMES))
# Shrinking reruns a failing program hundreds of times, each compiled anew
# (minutes on c): off unless asked for, as in test_dag_fuzz.py; a failure
# prints its whole program either way.
PHASES = tuple(Phase) if os.environ.get("LAZYRT_FUZZ_SHRINK") else \
    (Phase.explicit, Phase.reuse, Phase.generate)
INT_LIMIT = {np.dtype("int32"): 2.0 ** 31, np.dtype("int64"): 2.0 ** 62}


def _readonly(a):
    """A read-only view of ``a``: ``a`` itself can still be written."""
    v = a.view()
    v.flags.writeable = False
    return v


class _EagerLazyrt:
    """What each ``lr.`` call of a program means eagerly, on NumPy arrays."""
    maximum, minimum, where, logical_not = np.maximum, np.minimum, np.where, np.logical_not
    reshape = staticmethod(np.reshape)
    # the value at the call, whatever happens to the source later
    asarray = tensor = staticmethod(lambda a, copy=None: np.array(a, copy=True))
    astype = staticmethod(lambda x, dtype: x.astype(dtype, copy=True))


def _scalar_code(s) -> str:
    if isinstance(s, float) and not math.isfinite(s):
        return "nan" if math.isnan(s) else ("inf" if s > 0 else "-inf")
    return repr(s)


def _magnitude(v) -> float:
    if isinstance(v, np.ndarray):
        a = np.abs(v.astype(np.float64))
        return float(np.max(np.where(np.isnan(a), 0, a), initial=0.0))
    return abs(float(v))


def _fits_int(values, dtype) -> bool:
    """Every float in ``values`` converts to the int ``dtype`` without overflow."""
    v = np.trunc(np.asarray(values, np.float64))
    info = np.iinfo(dtype)
    return bool(np.all(np.isfinite(v)) and np.all(v >= info.min) and np.all(v <= info.max))


def _fits_to(src: tuple, dst: tuple) -> bool:
    """``src`` broadcasts to ``dst`` exactly (what an in-place operand must do)."""
    return len(src) <= len(dst) and all(s in (1, d) for s, d in zip(src[::-1], dst[::-1]))


def same_bits(got: np.ndarray, want: np.ndarray, zero_signs: bool = True) -> bool:
    """Equal values, NaN equal to any NaN, and the same sign of every zero (of
    every zero but 0.0 against -0.0 without ``zero_signs``)."""
    if got.dtype.kind != "f":
        return np.array_equal(got, want)
    numbers = ~np.isnan(want)
    if not zero_signs:
        numbers &= want != 0
    return np.array_equal(got, want, equal_nan=True) and \
        np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


def exact_zero_signs() -> bool:
    """Whether the backend under test keeps NumPy's sign of every zero (the jax
    backend documents where XLA does not: ``JaxBackend.exact_zero_signs``)."""
    return getattr(lr.backends.get(runtime.current_backend_name()), "exact_zero_signs", True)


def exact_division() -> bool:
    """Whether the backend under test divides floats as NumPy does (XLA's
    simplifier reassociates chains of divisions: ``JaxBackend.exact_division``)."""
    return getattr(lr.backends.get(runtime.current_backend_name()), "exact_division", True)


def _difference(got: np.ndarray, want: np.ndarray) -> str:
    """Where two arrays of one dtype and shape differ: count and first element."""
    equal = got == want
    if got.dtype.kind == "f":
        equal = (equal & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))
    if equal.all():
        return "none (a bug of this test)"
    where = np.argwhere(~np.asarray(equal))
    first = tuple(int(i) for i in where[0])
    bits = f"uint{8 * got.dtype.itemsize}"

    def show(a):
        v = a[first]
        return f"{v!r} (bits {v.view(bits):#x})" if a.dtype.kind == "f" else repr(v)
    return (f"{len(where)} of {got.size} elements, first at {first}: lazyrt {show(got)}, "
            f"NumPy {show(want)}")


class Program:
    """Draws statements and runs each on lazyrt and on NumPy, side by side.

    Choices come from hypothesis's ``data`` (shrinkable) or, for programs too
    long for it, from ``seed``; with ``slots``, values reuse that many names,
    so a long program keeps a few values live, as a training loop would.
    """

    def __init__(self, stats: Counter, data=None, seed=None, slots=None, max_side=4):
        self.data, self.stats, self.slots, self.max_side = data, stats, slots, max_side
        if data is not None:
            seed = data.draw(st.integers(0, 2 ** 32 - 1), label="seed")
        self.rng = np.random.default_rng(seed)
        self.lazy = {"lr": lr, "np": np, "nan": math.nan, "inf": math.inf, "_readonly": _readonly}
        self.eager = dict(self.lazy, lr=_EagerLazyrt)
        self.values: list[str] = []          # names of live values, oldest first
        self.source: dict[str, tuple] = {}   # copy or view -> (its origin, whether a copy)
        self.hosts: dict[str, list] = {}     # host array -> [values fed by lr.asarray without copy]
        self.seen: set[str] = set()
        self.lines: list[str] = []
        self.made = Counter()
        self.divides_floats = exact_division()

    # -- drawing helpers --
    def integer(self, lo, hi) -> int:
        if self.data is None:
            return int(self.rng.integers(lo, hi + 1))
        return self.data.draw(st.integers(lo, hi))

    def flip(self) -> bool:
        return self.integer(0, 1) == 1

    def choice(self, seq):
        return seq[self.integer(0, len(seq) - 1)]

    def say(self, line):
        self.lines.append(line)
        if self.data is not None:
            note(line)

    def dtype_of(self, name) -> np.dtype:
        return self.eager[name].dtype

    def shape_of(self, name) -> tuple:
        return self.eager[name].shape

    def pick(self, pred=lambda name: True, head=True):
        """A value; in a long program, the newest (the head of the chain)
        unless asked for any (an operand)."""
        names = [v for v in self.values if pred(v)]
        if self.slots and names and head:
            return names[-1]
        return self.choice(names[::-1]) if names else None  # shrinks toward the newest

    def new_name(self, prefix="v"):
        """A fresh name; with ``slots``, past that many, the least recent value's."""
        k = self.made[prefix]
        self.made[prefix] += 1
        if prefix == "v" and self.slots and k >= self.slots:
            name = self.values[0]
            self.source.pop(name, None)
            return name
        return f"{prefix}{k}"

    def feature(self, name):
        self.seen.add(name)
        self.stats[name] += 1

    # -- running one statement on both sides --
    def run(self, code, target=None, newest=True) -> bool:
        """Run ``code`` on NumPy and on lazyrt: both raise an error of one kind
        (False), or both run (True) and ``target`` gets NumPy's dtype and shape."""
        self.say(code)
        eager_exc = lazy_exc = None
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exec(code, self.eager)
            except Exception as exc:  # noqa: BLE001 - lazyrt must raise the same kind
                eager_exc = exc
        try:
            exec(code, self.lazy)
        except Exception as exc:  # noqa: BLE001
            lazy_exc = exc
        if eager_exc is not None or lazy_exc is not None:
            assert lazy_exc is not None, f"`{code}`: lazyrt records it, NumPy raises {eager_exc!r}"
            assert eager_exc is not None, f"`{code}`: NumPy runs it, lazyrt raises {lazy_exc!r}"
            assert same_error_kind(lazy_exc, type(eager_exc)), (
                f"`{code}`: lazyrt raises {lazy_exc!r}, NumPy {eager_exc!r}")
            self.lines[-1] += "  # raises"
            return False
        if target is not None:
            want = np.asarray(self.eager[target])
            dtype = lazyrt_dtype(want.dtype)
            self.eager[target] = np.array(want, dtype=dtype, copy=True)  # a copy at every view
            t = self.lazy[target]
            assert isinstance(t, lr.Tensor), f"`{code}`: {type(t).__name__}, not a Tensor"
            assert (t.dtype, t.shape) == (dtype, want.shape), (
                f"`{code}`: lazyrt records {t.dtype}{t.shape}, NumPy gives {dtype}{want.shape}")
            if target in self.values:
                self.values.remove(target)
            if newest:
                self.values.append(target)
            else:  # a new leaf: the first to be reused, and not the head of a chain
                self.values.insert(0, target)
        return True

    def check(self, names):
        """A barrier for ``names`` together, then each compared with NumPy's value."""
        lr.sync(*(self.lazy[n] for n in names))
        for n in names:
            got, want = self.lazy[n].numpy(), self.eager[n]
            assert not got.flags.writeable, f"{n}.numpy() is writable"
            assert (got.dtype, got.shape) == (want.dtype, want.shape), (
                f"{n}: lazyrt computes {got.dtype}{got.shape}, NumPy {want.dtype}{want.shape}")
            same = same_bits(got, want, exact_zero_signs())
            assert same, f"{n} differs from eager NumPy: {_difference(got, want)}"

    def overflows(self, expr) -> bool:
        """``expr`` (arithmetic) would overflow int32/int64, whose wrap-around
        lazyrt does not promise: estimated with every int value as float64."""
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                result = np.asarray(eval(expr, self.eager))
            except Exception:  # noqa: BLE001 - raising is checked by run()
                return False
            if result.dtype not in INT_LIMIT:
                return False
            shadow = dict(self.eager)
            for n in self.values:
                if self.dtype_of(n).kind in "iub":
                    shadow[n] = self.eager[n].astype(np.float64)
            try:
                estimate = np.asarray(eval(expr.replace("//", "/"), shadow), np.float64)
            except Exception:  # noqa: BLE001
                return True
        return _magnitude(estimate) + 1 >= INT_LIMIT[result.dtype]

    # -- leaves and host arrays --
    def leaf_shape(self):
        rank = self.integer(0, 3)
        shape = [self.integer(1, self.max_side) for _ in range(rank)]
        if rank and self.integer(0, 7) == 0:
            shape = [min(d, 2) for d in shape[:-1]] + [self.choice([17, 40, 130])]  # > a vector
        return tuple(shape)

    def host_values(self, dtype, shape):
        rng, n = self.rng, int(np.prod(shape))
        if dtype.kind == "b":
            return (rng.random(n) < 0.5).reshape(shape)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            big = {1: [info.min, info.max], 4: [2 ** 20, -2 ** 20], 8: [2 ** 40, -2 ** 40]}
            pool = np.array(list(range(-9, 10)) + big[dtype.itemsize])
            a = np.where(rng.random(n) < 0.9, rng.integers(-9, 10, n), rng.choice(pool, n))
            return np.clip(np.abs(a) if info.min == 0 else a, info.min, info.max) \
                .astype(dtype).reshape(shape)
        specials = np.array([s for s in SCALARS if type(s) is not bool] + F16_TIES * 4,
                            np.float64)
        kind = rng.integers(0, 4, n)
        a = np.select([kind == 0, kind == 1, kind == 2],
                      [rng.uniform(-4, 4, n), rng.integers(-5, 6, n) / 2.0,
                       rng.choice(specials, n)], rng.integers(-9, 10, n))
        with np.errstate(over="ignore"):
            return a.astype(dtype).reshape(shape)

    def host(self, dtype=None, shape=None) -> str:
        dtype = np.dtype(dtype or self.choice(DTYPE_NAMES))
        h = self.host_values(dtype, self.leaf_shape() if shape is None else shape)
        name = self.new_name("h")
        self.lazy[name] = self.eager[name] = h
        self.hosts[name] = []
        if h.size <= 64:
            self.say(f"{name} = np.array({h.tolist()!r}, dtype='{h.dtype}')")
        else:  # summarized; LAZYRT_FUZZ_SHRINK=1 shrinks a failure to small arrays
            with np.printoptions(threshold=64, edgeitems=3):
                self.say(f"{name} = np.{h!r}")
        return name

    def leaf(self, dtype=None, shape=None) -> str:
        shape = self.leaf_shape() if shape is None else shape
        feed = self.choice(FEEDS)
        if "[::2]" in feed:  # the host array is twice as long: every other row is fed
            if not shape:
                feed = FEEDS[0]
            else:
                shape = (2 * shape[0],) + shape[1:]
        h = self.host(dtype, shape)
        name = self.new_name()
        self.run(f"{name} = {feed.format(h)}", name, newest=not self.slots)
        if "copy" not in feed and "tensor" not in feed:
            self.hosts[h].append(name)
        return name

    def host_write(self):
        hosts = [h for h in self.hosts if self.hosts[h]] or list(self.hosts)
        if not hosts:
            return
        h = self.choice(hosts)
        fill = self.choice(["0", "1", "7"])
        index = self.choice(["...", "0"]) if self.eager[h].ndim else "..."
        self.run(f"{h}[{index}] = {fill}")
        if any(v in self.values for v in self.hosts[h]):
            self.feature("host write after asarray")

    # -- values from values --
    def operand_for(self, name, inplace=False):
        """(code, Python scalar or None): a scalar, or a value whose shape
        broadcasts with ``name``'s (to exactly it, for an in-place operand)."""
        if self.flip():
            scalar = self.choice(SCALARS)
            return _scalar_code(scalar), scalar
        shape = self.shape_of(name)
        fits = (lambda v: _fits_to(self.shape_of(v), shape)) if inplace else \
            (lambda v: _fits_to(self.shape_of(v), shape) or _fits_to(shape, self.shape_of(v)))
        other = self.pick(fits, head=False) if self.integer(0, 2) else None
        if other is None:
            keep = self.integer(0, len(shape))
            new = tuple(d if self.flip() else 1 for d in shape[len(shape) - keep:])
            if self.slots and not shape and not inplace:
                new = self.leaf_shape()  # a long chain of 0-d values would test little
            other = self.leaf(shape=new)
        return other, None

    def deviating_division(self, op, a, b, scalar) -> bool:
        """``a op b`` divides a float tensor on a backend that documents a
        deviation there (a quotient of a quotient: ``exact_division``)."""
        return op in DIVISIONS and not self.divides_floats and (
            self.dtype_of(a).kind == "f" or scalar is None and self.dtype_of(b).kind == "f")

    def binary(self, a=None, op=None, scalar=None):
        a = a or self.pick()
        dt = self.dtype_of(a)
        op = op or self.choice(ARITH * 3 + BITWISE + COMPARE * 2 + ["**", "max", "min"])
        if op == "**":  # not on bool: NumPy's `b ** 2` is np.square(b), int8, not power's int64
            op = op if dt.kind != "b" else "*"
            scalar = self.choice([2, 3] if dt.kind in "iu" else [2])
            b = str(scalar)
        elif scalar is not None:
            b = _scalar_code(scalar)
        else:
            b, scalar = self.operand_for(a)
        if self.deviating_division(op, a, b, scalar):
            return None
        reflect = scalar is not None and op != "**" and self.flip()
        left, right = (b, a) if reflect else (a, b)
        expr = f"lr.{op}imum({left}, {right})" if op in ("max", "min") else f"{left} {op} {right}"
        if op in ARITH + ["**"] and self.overflows(expr):
            return None
        name = self.new_name()
        if self.run(f"{name} = {expr}", name) and scalar is not None:
            self.feature(f"scalar with {dt}")
            if dt == np.float16 and type(scalar) is float:
                self.feature("float16 compared with a Python float" if op in COMPARE
                             else "float16 with a Python float")
        return name

    def unary(self, a=None, cast_to=None):
        a = a or self.pick()
        dt = self.dtype_of(a)
        op = "astype" if cast_to else \
            self.choice(["-{}", "abs({})", "~{}", "lr.logical_not({})", "astype", "where"])
        if op == "astype":
            target = np.dtype(cast_to or self.choice(DTYPE_NAMES))
            values = self.eager[a]
            if dt.kind == "f" and target.kind in "iu" and not _fits_int(values, target):
                return None  # C leaves it undefined, NumPy gives INT_MIN
            op = "{}.astype('%s')" % target.name
            if target == np.float16 and dt.itemsize > 2 and dt.kind == "f":
                self.feature("float narrowed to float16")
        elif op == "where":
            cond = self.pick(lambda v: self.dtype_of(v) == np.bool_ and
                             _fits_to(self.shape_of(v), self.shape_of(a)))
            if cond is None:
                cond = self.binary(a, self.choice(COMPARE), self.choice(SCALARS))
                if cond is None or cond not in self.values:
                    return None
            other, scalar = self.operand_for(a)
            if type(scalar) is int and dt.kind in "iu" and \
                    not np.iinfo(dt).min <= scalar <= np.iinfo(dt).max:
                other = "1"  # np.where wraps such an int around; lazyrt raises, as ufuncs do
            op = f"lr.where({cond}, {{}}, {other})"
        name = self.new_name()
        self.run(f"{name} = {op.format(a)}", name)
        return name

    def view(self, copy=None):
        a = self.pick()
        copy = self.flip() if copy is None else copy
        form = self.choice(COPIES if copy else VIEWS)
        name = self.new_name()
        if self.run(f"{name} = {form.format(a)}", name):
            self.source[name] = (a, copy)
            self.feature("copy" if copy else "view")
        return name

    def index(self, shape):
        if not shape or self.integer(0, 4) == 0:
            return "..."
        parts = []
        for d in shape[:self.integer(1, len(shape))]:
            k = self.integer(0, 3) if d else 1
            if k == 0:
                parts.append(str(self.integer(-d, d - 1)))
            elif k == 1:
                parts.append(":")
            else:
                start = self.integer(0, d)
                step = self.choice([1, 2, -1])
                parts.append(f"{start}::{step}" if step > 0 else f"{start}::-1")
        return ", ".join(parts)

    def write(self, a=None):
        """``a op= operand`` or ``a[index] = value``; counts what ``a`` is."""
        a = a or self.pick()
        dt = self.dtype_of(a)
        if self.integer(0, 5 if self.slots else 1):
            op = self.choice(ARITH + BITWISE)
            b, scalar = self.operand_for(a, inplace=True)
            if op in ARITH and self.overflows(f"{a} {op} {b}"):
                return
            if self.deviating_division(op, a, b, scalar):
                return
            ok = self.run(f"{a} {op}= {b}", a)
        else:
            idx = self.index(self.shape_of(a))
            try:
                target_shape = np.empty(self.shape_of(a))[eval(f"np.s_[{idx}]")].shape
            except IndexError:
                target_shape = ()
            b, scalar = self.operand_for(a, inplace=True)
            if scalar is None and not _fits_to(self.shape_of(b), target_shape):
                b, scalar = "1", 1
            value = self.eager[b] if scalar is None else scalar
            if dt.kind in "iu" and np.asarray(value).dtype.kind == "f" and \
                    not _fits_int(value, dt):
                return  # float to int: only where C and NumPy define it
            ok = self.run(f"{a}[{idx}] = {b}", a)
        if not ok:
            return
        if a in self.source:
            self.feature("write to a copy" if self.source[a][1] else "write to a view")
        if any(origin == a for origin, _ in self.source.values()):
            self.feature("write to the source of a copy")

    def barrier(self):
        a = self.pick()
        self.say(f"{a}.numpy()  # barrier")
        self.check([a])
        self.feature("barrier mid-program")

    # -- a program --
    def draw_program(self, steps):
        for _ in range(self.integer(1, 2)):
            self.leaf()
        families = [self.binary] * 5 + [self.unary] * 2 + [self.view] * 3 + [self.write] * 4 + \
            [self.leaf, self.host_write, self.barrier]
        for _ in range(self.integer(0, steps)):
            self.choice(families)()
        self.ensure_required()
        self.check(self.values)

    def draw_chain(self, steps):
        """``steps`` statements recorded without a barrier, then one for all."""
        self.leaf()
        # few writes: `x[idx] = v` runs outside generated kernels, so each one splits
        # the graph's kernels, and compiling hundreds of small C kernels takes minutes
        families = [self.binary] * 8 + [self.unary] * 3 + [self.view] * 3 + [self.write] * 2 + \
            [self.leaf, self.host_write]
        for _ in range(steps):
            if not self.eager[self.values[-1]].size:  # the rest would compute nothing:
                self.values.insert(0, self.values.pop())  # continue from the one before
            self.choice(families)()
        self.check(self.values)

    def wanted(self, *features) -> bool:
        """Whether to add a case for ``features``: if the program lacks one, in 4
        programs out of 5 (each draw shrinks to "no", so a shrunk program keeps
        only the cases its failure needs)."""
        return bool(set(features) - self.seen) and self.integer(0, 4) > 0

    def ensure_required(self):
        """The cases this fuzzer exists for, where the random part lacked them."""
        if self.wanted("barrier mid-program"):
            self.barrier()
        if self.wanted("write to a copy", "write to the source of a copy"):
            c = self.view(copy=True)
            if c in self.values:
                self.write(c)
                self.write(self.source[c][0])
        if self.wanted("write to a view"):
            v = self.view(copy=False)
            if v in self.values:
                self.write(v)
        if self.wanted("host write after asarray"):
            h = self.host()
            name = self.new_name()
            self.run(f"{name} = lr.asarray({h})", name)
            self.hosts[h].append(name)
            self.binary(name)
            self.host_write()
        if self.wanted("float16 with a Python float"):
            f = self.pick(lambda v: self.dtype_of(v) == np.float16) or self.leaf("float16")
            self.binary(f, self.choice(ARITH + ["max"]), self.choice([0.1, 1 / 3, 2.5, 1e-3]))
        if self.wanted("float16 compared with a Python float"):
            f = self.pick(lambda v: self.dtype_of(v) == np.float16) or self.leaf("float16")
            self.binary(f, self.choice(COMPARE), self.choice([0.1, 1 / 3, 2.5, 65504.0]))
        if self.wanted("float narrowed to float16"):
            f = self.pick(lambda v: self.dtype_of(v) in (np.float32, np.float64)) or \
                self.leaf(self.choice(["float32", "float64"]))
            self.unary(f, "float16")
        for d in DTYPE_NAMES:
            if self.wanted(f"scalar with {d}"):
                a = self.pick(lambda v: self.dtype_of(v) == d) or self.leaf(d)
                self.binary(a, self.choice(ARITH + COMPARE), self.choice(SCALARS))


def _budget(backend):
    """(programs, random steps per program): the Triton interpreter is slow.
    25 programs under the default profile (15 examples): fewer would miss a
    required feature by chance."""
    n = settings.default.max_examples * 5 // 3
    return (max(1, 2 * n // 3), 10) if backend == "triton" else (n, 16)


def test_random_programs_match_eager_numpy(backend, record_property):
    stats = Counter()
    programs, steps = _budget(backend)

    @settings(max_examples=programs, phases=PHASES)
    @given(st.data())
    def one_program(data):
        stats["programs"] += 1
        Program(stats, data).draw_program(steps)

    one_program()
    record_property("random_programs", stats["programs"])
    missing = [f for f in REQUIRED if not stats[f]]
    if stats["programs"] >= 10:  # fewer (the `quick` profile) may miss one by chance
        assert not missing, f"never exercised on {backend}: {missing} ({dict(stats)})"


@settings(max_examples=max(1, settings.default.max_examples // 25),
          phases=(Phase.explicit, Phase.reuse, Phase.generate))  # shrinking a seed is no use
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_long_chain_matches_eager_numpy(backend, seed, tmp_path_factory):
    """A few thousand statements (more ops: casts, broadcasts) in one graph;
    on failure the whole program is written to a file."""
    program = Program(Counter(), seed=seed, slots=6)
    try:
        program.draw_chain(1000 if backend == "triton" else 2000)
    except AssertionError as exc:
        listing = tmp_path_factory.mktemp("chain") / "program.py"
        listing.write_text("\n".join(program.lines) + "\n")
        raise AssertionError(f"{exc}\n(the program, {len(program.lines)} lines: {listing})") \
            from None
