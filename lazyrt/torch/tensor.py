"""The lazy ``torch.Tensor``: a wrapper subclass on device ``lazy`` holding a
lazyrt tensor, and the functional wrapper users see around it.

Two layers, as torch's own LTC has them:

- ``LazyTensor`` (inner): a ``_make_wrapper_subclass`` tensor whose
  ``__torch_dispatch__`` records every aten op into lazyrt's recorder (the
  same recorder and graph as the native API). It has value semantics: it
  never aliases another tensor's storage.
- the user's tensor (outer): torch's C++ functionalization wrapper
  (``torch._to_functional_tensor``) around a ``LazyTensor``. Functionalization
  turns views and in-place ops into out-of-place ops (``view_copy``,
  ``select_scatter``, ``add``...) and replays them on every alias, so
  ``a.view(-1).add_(1)`` is seen by ``a`` exactly as in eager PyTorch.

Values cross between the two with :func:`wrap` and :func:`unwrap`.
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np
import torch

from .. import _frames
from .. import _recorder as R
from .. import dtypes as D
from .. import runtime
from .._source_lines import source_line
from ..api.creation import tensor as _lr_tensor
from ..metrics import metrics

DEVICE = torch.device("lazy")

TORCH_OF_CODE = {D.BOOL: torch.bool, D.INT8: torch.int8, D.UINT8: torch.uint8,
                 D.INT32: torch.int32, D.INT64: torch.int64, D.FLOAT16: torch.float16,
                 D.FLOAT32: torch.float32, D.FLOAT64: torch.float64,
                 D.BFLOAT16: torch.bfloat16}
CODE_OF_TORCH = {t: c for c, t in TORCH_OF_CODE.items()}


def code_of(dtype: torch.dtype) -> int:
    """lazyrt's dtype code for a torch dtype; a clear error for the ones it lacks."""
    try:
        return CODE_OF_TORCH[dtype]
    except KeyError:
        raise TypeError(f"lazyrt.torch: dtype {dtype} is not supported on the lazy device; "
                        f"use one of {', '.join(str(t) for t in CODE_OF_TORCH)}") from None


_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass
_STRIDED = torch.strided


class LazyTensor(torch.Tensor):
    """The inner lazy tensor: torch metadata (shape, dtype, device ``lazy``)
    over a lazyrt tensor (``self.value``). Users never hold one directly:
    they hold its functional wrapper."""

    value: object

    @staticmethod
    def __new__(cls, value, requires_grad=False):
        node = value._node
        # positional: torch's argument parser matches keywords by name, which costs a
        # fifth of the call (this runs for every result of every op)
        out = _make_wrapper_subclass(cls, node.shape, None, None, None,
                                     TORCH_OF_CODE[node.dtype], _STRIDED, DEVICE, False,
                                     requires_grad)
        out.value = value
        return out

    # no torch-function layer: every op goes straight to aten and __torch_dispatch__
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

    def __repr__(self):
        return f"LazyTensor(shape={tuple(self.shape)}, dtype={self.dtype})"


def _not_installed(func, args, kwargs):
    raise RuntimeError(f"lazyrt.torch: {func} on a lazy tensor before lazyrt.torch's "
                       f"dispatcher was installed (import lazyrt.torch)")


#: where :meth:`LazyTensor.__torch_dispatch__` sends every aten call: the dispatcher
#: (:mod:`.dispatch`) installs itself here when imported
_dispatch = _not_installed
#: per thread, how many lazy dispatches are running (``depth``: 0 in user code)
dispatch_state = threading.local()


def install_dispatch(fn) -> None:
    """Send every aten call on a lazy tensor to ``fn(func, args, kwargs)``."""
    global _dispatch
    _dispatch = fn


def depth() -> int:
    """How many lazy dispatches are running on this thread (0: user code)."""
    return getattr(dispatch_state, "depth", 0)


def raw(value) -> LazyTensor:
    """A lazyrt tensor as a raw ``LazyTensor`` (what lowerings return)."""
    return LazyTensor(value)


def wrap(value) -> torch.Tensor:
    """A lazyrt tensor as a user tensor (functional wrapper around a ``LazyTensor``)."""
    return torch._to_functional_tensor(LazyTensor(value))


def unwrap(t: torch.Tensor):
    """The lazyrt tensor behind a user tensor or a raw ``LazyTensor``, with every
    pending in-place update through its aliases applied first."""
    if type(t) is LazyTensor:
        return t.value
    if torch._is_functional_tensor(t):
        # the C++ sync itself (torch._sync adds an import and a check for torch.compile's
        # Python FunctionalTensor, which a lazy tensor never is)
        torch._functionalize_sync(t)
        inner = torch._from_functional_tensor(t)
        if type(inner) is LazyTensor:
            return inner.value
    raise TypeError(f"lazyrt.torch: expected a tensor on the lazy device, got one on "
                    f"{t.device} (shape {tuple(t.shape)}, dtype {t.dtype})")


def is_lazy(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "lazy"


def from_cpu(t: torch.Tensor):
    """A CPU torch tensor's current value as a lazyrt data leaf (copied: later
    writes to ``t`` do not reach it, as with eager ``.to()``)."""
    t = t.detach()
    if t.dtype not in CODE_OF_TORCH:
        code_of(t.dtype)  # raises the clear error
    t = t.resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:  # torch has no NumPy bfloat16: hand over its bits
        return _lr_tensor(t.view(torch.uint16).numpy(force=True).view(D.bfloat16))
    return _lr_tensor(t.numpy(force=True))


#: torch's package folder, with the separator: ``torch/`` and not ``torchvision/``
_TORCH_DIR = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "")


def user_frame():
    """The user's frame (:mod:`lazyrt._frames`'s rule, the recorder's: outside
    lazyrt and, once ``lazyrt.torch`` is imported, outside torch), as a frame,
    which warnings need."""
    return _frames.user_frame(sys._getframe(1))


def site(frame) -> tuple:
    """``(code, offset)`` of a frame as lazyrt's recorder keys source lines (the
    bytecode offset on 3.11+, minus the line number before)."""
    if frame is None:
        return None, 0
    return frame.f_code, (frame.f_lasti if sys.version_info >= (3, 11) else -frame.f_lineno)


def count_materialization():
    """Count one materialization at the user's line (not torch's or lazyrt's)."""
    metrics.materializations += 1
    metrics.materialized_at[site(user_frame())] += 1


#: errors eager raises at the call that only a value computed in the graph can
#: show (an integer division by a zero the graph computes): (a 0-d lazyrt bool,
#: true where eager would have raised; the message; the user's code and offset)
_deferred: list = []


def defer_error(flag, message, error=RuntimeError):
    """Raise ``error(message)`` at the next barrier of ``lazyrt.torch`` if ``flag``
    (a 0-d lazyrt tensor, computed with that barrier's values) is true; ``message``
    may instead be a function of ``flag``'s value giving the message, or None for
    no error (an index check reports the bad index it computed)."""
    _deferred.append((flag, message, error, site(user_frame())))


def sync(*values):
    """``lazyrt.torch``'s barrier: compute ``values`` (every pending tensor when
    none are given) and every deferred check in one graph, then raise the first
    check that holds, naming the user's line that recorded it."""
    checks = _deferred[:]
    del _deferred[:]  # taken before the run: a check that holds is raised once
    try:
        if values:
            runtime.sync(*values, *(check[0] for check in checks))
        else:
            runtime.sync()
    except BaseException:
        # the run failed (an index out of range): what depends on the failed op holds
        # its error, the rest was computed; a check not yet raised waits for the next
        _deferred[:0] = [c for c in checks if c[0].is_pending or _failure_text(c) is not None]
        raise
    for check in checks:
        text = _failure_text(check)
        if text is not None:
            flag, message, error, (code, offset) = check
            where = source_line(code, offset) or "<unknown>"
            raise error(f"{text} (lazyrt.torch: raised at this barrier, for the op recorded "
                        f"at {where})")


def _failure_text(check):
    """The message of a computed check that holds, else None; a check computed from an
    op that failed (its division reads a failed gather, say) holds that op's error, not
    its own."""
    flag, message, _, _ = check
    if type(flag._node.value) is runtime.FailedValue:
        return None
    found = flag.numpy().item()
    return message(found) if callable(message) else (message if found else None)


# While the torch.compile backend records a graph to replay (:mod:`.fx_program`),
# reading a value would bake this call's data into every later call, and the lazy
# front-end's fallback would compute mid-recording: per thread, ``refuse_reads`` /
# ``refuse_fallback`` on ``dispatch_state`` hold the functions called instead (they
# raise), set only then.

def reads_refused() -> bool:
    """Whether values may not be read now (this thread records a graph for replay)."""
    return getattr(dispatch_state, "refuse_reads", None) is not None


def compute(value) -> np.ndarray:
    """The value of a lazyrt tensor (a barrier, counted by the caller)."""
    refuse = getattr(dispatch_state, "refuse_reads", None)
    if refuse is not None:
        refuse(value)
    if value.is_pending or _deferred:
        sync(value)
    return value.numpy()


def to_torch_cpu(value) -> torch.Tensor:
    """A lazyrt tensor's value as a fresh, writable CPU torch tensor (a barrier)."""
    data = np.array(compute(value), copy=True)
    if data.dtype == D.bfloat16:  # ml_dtypes' bfloat16 and torch's share their bits
        return torch.from_numpy(data.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(data)


def number_of(value, code: int):
    """A Python number converted to lazyrt dtype ``code`` as torch converts a Scalar
    argument to a tensor's dtype (2.7 to an int is 2, 2 to a bool is True)."""
    return D.DTYPES[code].type(value).item()


def runtime_scalar(value, code: int):
    """A Python number as a 0-d lazyrt runtime scalar of dtype ``code``: its value
    is a parameter of the graph, never part of its key (a new learning rate does
    not recompile)."""
    return R.wrap(R.scalar_node(value, code, False))
