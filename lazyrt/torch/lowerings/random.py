"""Random draws on the lazy device: lazyrt's counter-based Philox op by default,
or torch's CPU generator in eager-mask mode.

Philox (the default): every call (``torch.rand/randn(..., device="lazy")``,
``*_like``, ``uniform_``, ``normal_``, ``bernoulli``, dropout's mask) draws one
fresh 62-bit seed from torch's generator (the default one, or the call's
``generator=``) and records ``lazyrt.random`` at offset 0. The seed is a runtime
scalar, so a training loop with dropout gets a fresh mask every step and compiles
nothing new; ``torch.manual_seed`` makes a lazy run reproducible. The values are
not eager torch's (eager CPU torch draws serially from mt19937).

Eager-mask mode (``with lazyrt.torch.eager_random():``, or the environment
variable ``LAZYRT_TORCH_EAGER_RANDOM=1`` for the whole process): torch draws
each value on the CPU as eager would and it enters as data, so a lazy run
matches eager torch exactly (dropout as eager's ``bernoulli_`` noise) — for
parity tests; each draw is a new data leaf.

Integer draws (``randint``, ``randint_like``, ``random_``) are
``lazyrt.random.integers`` under Philox, with torch's bounds and its errors for
bad ones; a span over 2^63 (``random_(-2**63)`` on int64) is drawn by torch.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import torch

from ... import _recorder as R
from ... import _recorder_shapes as S
from ... import dtypes as D
from ...api import creation as C
from ...api import pointwise as P
from ...api import random as Rn
from ...api import sorting as SO
from ..operands import operand
from ..registry import register_random
from ..tensor import (LazyTensor, code_of, count_materialization, defer_error, from_cpu,
                     to_torch_cpu)

__all__ = ["eager_random", "eager_random_enabled"]

aten = torch.ops.aten
_eager = [os.environ.get("LAZYRT_TORCH_EAGER_RANDOM", "0") not in ("", "0")]


@contextlib.contextmanager
def eager_random(enabled: bool = True):
    """Within the block, random draws on the lazy device are made by torch on the
    CPU and fed in as data (eager-mask mode: exactly eager torch's values, for
    parity tests); ``eager_random(False)`` switches back to Philox inside it.
    Process-wide, not per thread."""
    previous = _eager[0]
    _eager[0] = bool(enabled)
    try:
        yield
    finally:
        _eager[0] = previous


def eager_random_enabled() -> bool:
    """Whether random draws are torch's (eager-mask mode) rather than Philox."""
    return _eager[0]


# --- eager-mask mode: torch draws on the CPU, the values enter as data ---------------

def _drawn(a, draw, dtype=None):
    cpu = torch.empty(tuple(a.shape), dtype=dtype or a.dtype)
    draw(cpu)
    return LazyTensor(from_cpu(cpu))


def _eager_dropout(x, p):
    """Eager torch's CPU dropout exactly: ``noise = bernoulli_(1 - p) / (1 - p)``
    drawn by torch, ``out = x * noise``; the mask is ``noise != 0``."""
    noise = torch.empty(tuple(x.shape), dtype=x.dtype).bernoulli_(1 - p).div_(1 - p)
    out = x.value * from_cpu(noise)
    return LazyTensor(out), LazyTensor(from_cpu(noise != 0))


# --- Philox: lazyrt.random keyed by a seed drawn from torch's generator -------------------

#: while a replayed program is being recorded (:func:`seeds_drawn`), each seed drawn,
#: with its generator: the replay draws a fresh one in its place on every call
_seed_log = [None]


def draw_seed(generator=None) -> int:
    """A fresh 62-bit seed from ``generator`` (torch's default one if None)."""
    return int(torch.randint(0, 2**62, (), generator=generator))


def _seed(generator) -> int:
    seed = draw_seed(generator)
    log = _seed_log[0]
    if log is not None:
        log.append((seed, generator))
    return seed


@contextlib.contextmanager
def seeds_drawn():
    """Within the block, every Philox seed drawn is appended to the yielded list as
    ``(seed, generator)``: a recording that will be replayed (the torch.compile
    backend) finds the seed among its parameters and draws anew there each call."""
    previous, log = _seed_log[0], []
    _seed_log[0] = log
    try:
        yield log
    finally:
        _seed_log[0] = previous


def _draw_code(code: int) -> int:
    """The dtype lazyrt.random draws in for a result of ``code`` (float16 via float32)."""
    return D.FLOAT64 if code == D.FLOAT64 else D.FLOAT32


def _uniform(shape, code, generator):
    return Rn.uniform(tuple(shape), seed=_seed(generator), dtype=D.DTYPES[_draw_code(code)])


def _cast(x, code):
    return x if x._node.dtype == code else R.wrap(R.cast(x._node, code))


def _philox_uniform(a, low, high, generator, dtype=None):
    code = code_of(dtype or a.dtype)
    comp = _draw_code(code)
    u = _uniform(a.shape, code, generator)
    if not (low == 0 and high == 1):
        u = u * operand(high - low, comp) + operand(low, comp)
    return LazyTensor(_cast(u, code))


def _philox_normal(a, mean, std, generator, dtype=None):
    code = code_of(dtype or a.dtype)
    comp = _draw_code(code)
    z = Rn.normal(tuple(a.shape), seed=_seed(generator), dtype=D.DTYPES[comp])
    if not (mean == 0 and std == 1):
        z = z * operand(std, comp) + operand(mean, comp)
    return LazyTensor(_cast(z, code))


def _philox_bernoulli(a, p, generator):
    """1 where a uniform draw is below ``p`` (a number, or a lazy tensor of
    probabilities broadcast to ``a``), in ``a``'s dtype."""
    comp = D.FLOAT64 if (isinstance(p, torch.Tensor) and p.dtype == torch.float64) \
        else D.FLOAT32
    u = _uniform(a.shape, comp, generator)
    return LazyTensor(_cast(u < operand(p, comp), code_of(a.dtype)))


def _philox_dropout(x, p):
    """``native_dropout``: ``(where(keep, x / (1 - p), 0), keep)`` with the keep mask
    ``lazyrt.random.dropout_mask`` (uniform >= p); backward multiplies by the same
    mask node, so forward and backward agree by construction."""
    v = x.value
    keep = Rn.dropout_mask(tuple(x.shape), p, seed=_seed(None))
    code = v._node.dtype
    # eager's CPU dropout multiplies by a noise tensor of x's dtype: float16's scale
    # is rounded to float16 (as it is here), the product rounded once
    scale = 1.0 / (1.0 - p)
    out = P.where(keep, v * operand(scale, code), operand(0, code))
    return LazyTensor(_cast(out, code)), LazyTensor(keep)


#: binary digits of each floating dtype: random_ on it reaches at most 2^digits
_DIGITS = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


def _reachable(dtype) -> tuple:
    """The [lowest, highest] values ``random_`` may draw in ``dtype`` (both included)."""
    if dtype == torch.bool:
        return 0, 1
    if dtype in _DIGITS:
        return -2 ** _DIGITS[dtype], 2 ** _DIGITS[dtype]
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max)


def _integers(a, low, high, generator, dtype=None):
    """``a.random_(low, high)`` or ``randint_like(a, low, high, dtype=dtype)``:
    integers uniform in [low, high) of ``a``'s shape, ``high=None`` meaning the
    dtype's highest value included; torch's checks and messages."""
    dtype = dtype or a.dtype
    lowest, highest = _reachable(dtype)
    top = highest + 1 if high is None else high
    if low >= top:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                           f"from={low} >= to={top}")
    if low < lowest:
        raise RuntimeError(f"from is out of bounds for {dtype}")
    if top - 1 > highest:
        raise RuntimeError(f"to - 1 is out of bounds for {dtype}")
    if _eager[0] or top - low > Rn.MAX_SPAN:
        return _drawn(a, lambda t: t.random_(low, high, generator=generator), dtype)
    draw = Rn.integers(tuple(a.shape), low, top, seed=_seed(generator))
    return LazyTensor(_cast(draw, code_of(dtype)))


def _bound(value) -> int:
    """A ``randint_like`` bound given as a number or a 0-d tensor (read: a barrier)."""
    return int(value.item()) if isinstance(value, torch.Tensor) else int(value)


def _randint_like(a, high, *, dtype=None, generator=None, **_ignored):
    return _integers(a, 0, _bound(high), generator, dtype)


def _randint_like_low(a, low, high, *, dtype=None, generator=None, **_ignored):
    return _integers(a, _bound(low), _bound(high), generator, dtype)


# --- the table dispatch consults ----------------------------------------------------------

def _floating(dtype) -> bool:
    return dtype in (torch.float16, torch.float32, torch.float64)


def _uniform_op(a, low=0.0, high=1.0, *, generator=None):
    if _eager[0] or not _floating(a.dtype):
        return _drawn(a, lambda t: t.uniform_(low, high, generator=generator))
    return _philox_uniform(a, low, high, generator)


def _normal_op(a, mean=0.0, std=1.0, *, generator=None):
    if _eager[0] or not _floating(a.dtype):
        return _drawn(a, lambda t: t.normal_(mean, std, generator=generator))
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _philox_normal(a, mean, std, generator)


def _rand_like(a, *, dtype=None, generator=None, **_ignored):
    if _eager[0] or not _floating(dtype or a.dtype):
        return _drawn(a, lambda t: t.uniform_(0, 1, generator=generator), dtype)
    return _philox_uniform(a, 0, 1, generator, dtype)


def _randn_like(a, *, dtype=None, generator=None, **_ignored):
    if _eager[0] or not _floating(dtype or a.dtype):
        return _drawn(a, lambda t: t.normal_(0, 1, generator=generator), dtype)
    return _philox_normal(a, 0, 1, generator, dtype)


def _check_probability(p):
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")


def _bernoulli_p(a, p=0.5, *, generator=None):
    _check_probability(p)
    if _eager[0]:
        return _drawn(a, lambda t: t.bernoulli_(p, generator=generator))
    return _philox_bernoulli(a, float(p), generator)


def _bernoulli_default(a, *, generator=None):
    """``torch.bernoulli(probs)``: one draw per element with probability ``probs``."""
    if _eager[0] or not _floating(a.dtype):
        return _drawn(a, lambda t: t.copy_(torch.bernoulli(
            to_torch_cpu(a.value), generator=generator)))
    return _philox_bernoulli(a, a, generator)


def _bernoulli_tensor(a, p, *, generator=None):
    if _eager[0] or type(p) is not LazyTensor or not _floating(p.dtype):
        probs = to_torch_cpu(p.value) if type(p) is LazyTensor else p
        return _drawn(a, lambda t: t.bernoulli_(probs, generator=generator))
    return _philox_bernoulli(a, p, generator)


def _native_dropout(x, p, train):
    """``native_dropout(x, p, train)`` (what ``F.dropout`` calls on the lazy device):
    ``(output, keep mask)``; ``train=False`` keeps everything."""
    if not _floating(x.dtype):
        raise RuntimeError(f"lazyrt.torch: native_dropout: dropout needs a floating "
                           f"tensor, got {x.dtype} of shape {tuple(x.shape)}")
    if not 0 <= p <= 1:
        raise ValueError(f"lazyrt.torch: native_dropout: dropout probability has to be "
                         f"between 0 and 1, but got {p}")
    if train is False or p == 0 or x.numel() == 0:
        return LazyTensor(x.value), _full_mask(x, True)
    if p == 1:
        return LazyTensor(C.full(tuple(x.shape), 0, D.DTYPES[x.value._node.dtype])), \
            _full_mask(x, False)
    if _eager[0]:
        return _eager_dropout(x, float(p))
    return _philox_dropout(x, float(p))


_MULTINOMIAL_ERRORS = {
    1: "probability tensor contains either `inf`, `nan` or element < 0",
    2: "invalid multinomial distribution (sum of probabilities <= 0)"}


def _multinomial(probs, num_samples, replacement=False, *, generator=None):
    """``torch.multinomial``: each draw is the category whose exponential clock
    ``Exp(1) / p`` rings first (an argmin per draw: a fused reduction), which picks
    category j with probability p_j / sum(p); without replacement, the first
    ``num_samples`` clocks of one race in order, which is the law of drawing them
    one by one (eager's own method: a zero-probability category never rings, and
    comes after the others, in index order, when more are asked for than have
    a chance). Eager's checks of the probabilities (finite, >= 0, a positive
    sum) raise at the call when they are known, at the barrier otherwise."""
    if probs.dim() not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got {probs.dim()} "
                           f"(lazyrt.torch: multinomial of shape {tuple(probs.shape)})")
    if not probs.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{probs.dtype}")
    n = probs.shape[-1]
    if num_samples <= 0:
        raise RuntimeError(f"cannot sample n_sample <= 0 samples (got {num_samples})")
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           f"replacement (n_sample {num_samples}, {n} categories)")
    if _eager[0] or n == 0 or probs.numel() == 0:  # eager's draw (or its error) on the CPU
        count_materialization()
        cpu = torch.multinomial(to_torch_cpu(probs.value), num_samples, replacement,
                                generator=generator)
        return LazyTensor(from_cpu(cpu))
    code = D.FLOAT64 if probs.dtype == torch.float64 else D.FLOAT32
    p = _cast(probs.value, code)
    rows = p.shape[0] if p.ndim == 2 else 1
    p = S.reshape(p, (rows, n)) if p.ndim == 1 else p
    _check_distribution(p)
    zero, inf = operand(0, code), operand(float("inf"), code)
    draws = num_samples if replacement else 1
    u = Rn.uniform((rows, draws, n), seed=_seed(generator), dtype=D.DTYPES[code])
    pr = S.reshape(p, (rows, 1, n))
    clock = P.where(pr > zero, -P.log1p(-u) / pr, inf)
    if replacement or num_samples == 1:
        out = S.reshape(S.argmin(clock, axis=-1), (rows, num_samples))
    else:
        order = SO.argsort(S.reshape(clock, (rows, n)), axis=-1, stable=True)
        out = S.getitem(order, (slice(None), slice(0, num_samples)))
    return LazyTensor(out if probs.dim() == 2 else S.reshape(out, (num_samples,)))


def _check_distribution(p):
    """Eager's two checks of multinomial's rows ``p``, in its order: at the call
    when ``p`` is known (a data leaf, a computed tensor), else as one 0-d code the
    barrier computes (0: valid, else a key of ``_MULTINOMIAL_ERRORS``)."""
    known = p._node.value if isinstance(p._node.value, np.ndarray) else None
    if known is not None:
        bad = 1 if not (np.isfinite(known).all() and (known >= 0).all()) else \
            2 if not (known.sum(axis=-1) > 0).all() else 0
        if bad:
            raise RuntimeError(_MULTINOMIAL_ERRORS[bad])
        return
    code = p._node.dtype
    zero = operand(0, code)

    def number(k):
        return operand(k, D.INT64)
    valid = S.all(P.logical_and(P.isfinite(p), p >= zero))
    positive = S.all(S.sum(p, axis=-1) > zero)
    found = S.where(valid, S.where(positive, number(0), number(2)), number(1))
    defer_error(found, lambda c: _MULTINOMIAL_ERRORS.get(c))


def _full_mask(x, keep: bool):
    return LazyTensor(C.full(tuple(x.shape), keep, D.DTYPES[D.BOOL]))


_DRAWS = {
    aten.normal_functional.default: _normal_op,
    aten.uniform.default: _uniform_op,
    aten.bernoulli.p: _bernoulli_p,
    aten.bernoulli.default: _bernoulli_default,
    aten.bernoulli.Tensor: _bernoulli_tensor,
    aten.rand_like.default: _rand_like,
    aten.randn_like.default: _randn_like,
    aten.native_dropout.default: _native_dropout,
    aten.random.default: lambda a, *, generator=None: _integers(a, 0, None, generator),
    aten.random.to: lambda a, to, *, generator=None: _integers(a, 0, to, generator),
    getattr(aten.random, "from"): lambda a, low, high=None, *, generator=None:
        _integers(a, low, high, generator),
    aten.randint_like.default: _randint_like,
    aten.randint_like.generator: _randint_like,
    aten.randint_like.Tensor: _randint_like,
    aten.randint_like.Tensor_generator: _randint_like,
    aten.randint_like.low_dtype: _randint_like_low,
    aten.randint_like.low_generator_dtype: _randint_like_low,
    aten.multinomial.default: _multinomial,
}
for _op, _fn in _DRAWS.items():
    register_random(_op)(_fn)
