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

import torch

from .. import _recorder as R
from .. import dtypes as D
from ..api import creation as C
from ..api import pointwise as P
from ..api import random as Rn
from .operands import operand
from .tensor import LazyTensor, code_of, from_cpu, to_torch_cpu

__all__ = ["eager_random", "eager_random_enabled", "RANDOM"]

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

def _seed(generator) -> int:
    """A fresh 62-bit seed from ``generator`` (torch's default one if None)."""
    return int(torch.randint(0, 2**62, (), generator=generator))


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


def _full_mask(x, keep: bool):
    return LazyTensor(C.full(tuple(x.shape), keep, D.DTYPES[D.BOOL]))


RANDOM = {
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
}
