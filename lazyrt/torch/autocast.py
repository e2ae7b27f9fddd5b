"""``torch.autocast("cpu")`` on lazy tensors: eager's CPU casting policy, above autograd.

Why lazyrt has to do it: torch's autocast kernels sit on the ``AutocastCPU``
dispatch key, which a tensor carries by its backend (CPU tensors have it; the
``Lazy`` backend maps to no autocast key), and each kernel casts only the
arguments it deems eligible: CPU (or MKLDNN) floating tensors
(``is_autocast_eligible`` in ATen's ``autocast_mode.h``). Lazy tensors are
neither, so without this module autocast passes them by silently.

How: while a CPU autocast region is entered (``torch.autocast("cpu")``,
``torch.cpu.amp.autocast``, as a decorator too), a torch-function mode watches
each torch call that has a lazy tensor among its arguments. Once per call
signature (function, argument dtypes, autocast dtype) it asks torch's own
autocast kernel what it would do: it runs the call on CPU *probes* (one element
expanded to each argument's shape, so nothing is computed) and records, below
autocast, the casts the kernel makes before it hands the op on, then stops.
The same casts are then applied to the lazy arguments (``x.to(dtype)``, which
autograd records as eager's casts are) and the call proceeds. Torch's op lists
and policies (lower precision, float32, promote) are thus torch's, for the
installed version. A Python-level torch function (``F.layer_norm``,
``F.multi_head_attention_forward``) hands itself to the mode whole; the mode
runs its body with the mode on, so each torch call inside is cast by its own
rule, as eager's per-op kernels do (the body is the function's own code with
its ``has_torch_function*`` checks answering False, so it does not hand itself
over again).

``torch.autocast("lazy")`` is refused by torch itself ("unsupported autocast
device_type 'lazy'"); use ``torch.autocast("cpu")`` around lazy code.
"""
from __future__ import annotations

import types
import warnings

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


_AUTOCAST_CPU = torch._C.DispatchKey.AutocastCPU
_TO_COPY = torch.ops.aten._to_copy.default


class _Reached(Exception):
    """The probed call reached the op itself: every autocast cast is recorded."""


class _CastRecorder(TorchDispatchMode):
    """Below autocast: the casts its kernel makes of the probes (while it runs,
    its own key is excluded), then a stop at the first other op."""

    def __init__(self, probes):
        super().__init__()
        self.position = {id(p): k for k, p in enumerate(probes)}
        self.keep = list(probes)  # ids stay unique while recorded
        self.casts: dict[int, torch.dtype] = {}

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        k = self.position.get(id(args[0])) if args else None
        if (func is _TO_COPY and k is not None and "dtype" in kwargs
                and torch._C._dispatch_tls_is_dispatch_key_excluded(_AUTOCAST_CPU)):
            self.casts[k] = kwargs["dtype"]
            out = torch.empty((), dtype=kwargs["dtype"]).expand(args[0].shape)
            self.position[id(out)] = k
            self.keep.append(out)
            return out
        raise _Reached


def _flatten(args: tuple, kwargs: dict) -> list:
    """The arguments as one list: positional, then keyword values; a list or tuple
    argument (``torch.cat``'s tensors) contributes its elements. Lighter than a
    pytree, which cost ~4 us a call here; torch ops take no deeper nesting."""
    leaves = []
    for a in (*args, *kwargs.values()):
        if type(a) in (list, tuple):
            leaves.extend(a)
        else:
            leaves.append(a)
    return leaves


def _lazy(x) -> bool:
    # is_cpu first: a CPU tensor (eager code under CPU autocast) answers in ~60 ns
    return isinstance(x, torch.Tensor) and not x.is_cpu and x.device.type == "lazy"


def _any_lazy(args: tuple, kwargs: dict) -> bool:
    """Whether a lazy tensor is among the arguments (as :func:`_flatten` sees them)."""
    for a in (*args, *kwargs.values()):
        if type(a) in (list, tuple):
            if any(_lazy(b) for b in a):
                return True
        elif _lazy(a):
            return True
    return False


def _unflatten(leaves: list, args: tuple, kwargs: dict) -> tuple:
    """(args, kwargs) of :func:`_flatten`'s shape holding ``leaves``."""
    it = iter(leaves)

    def take(a):
        return type(a)(next(it) for _ in a) if type(a) in (list, tuple) else next(it)
    new_args = tuple(take(a) for a in args)
    return new_args, {k: take(v) for k, v in kwargs.items()}


def _probe(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor of ``t``'s shape and dtype holding one element (nothing to compute)."""
    return torch.empty((), dtype=t.dtype).expand(t.shape)


_REDIRECT_CHECKS = ("has_torch_function", "has_torch_function_unary",
                    "has_torch_function_variadic")
_BODIES: dict = {}


def _never(*args, **kwargs):
    return False


def _body(func):
    """``func``'s own code without its hand-over to torch-function modes, or None
    where it has none (a builtin, or Python code that makes no such check)."""
    if func in _BODIES:
        return _BODIES[func]
    body = None
    if isinstance(func, types.FunctionType) and \
            any(n in func.__code__.co_names for n in _REDIRECT_CHECKS):
        scope = {**func.__globals__, **{n: _never for n in _REDIRECT_CHECKS}}
        body = types.FunctionType(func.__code__, scope, func.__name__, func.__defaults__,
                                  func.__closure__)
        body.__kwdefaults__ = func.__kwdefaults__
    _BODIES[func] = body
    return body


class LazyAutocast(TorchFunctionMode):
    """The torch-function mode active inside a CPU autocast region (see the module)."""

    #: (function, argument signature, autocast dtype) -> {leaf position: dtype}
    plans: dict = {}

    def __init__(self):
        super().__init__()
        self.running: set = set()  # Python functions whose body runs now

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _any_lazy(args, kwargs) or not torch.is_autocast_enabled("cpu"):
            return func(*args, **kwargs)
        leaves = _flatten(args, kwargs)
        body = _body(func)
        if body is not None and func not in self.running:  # each call inside: its own rule
            self.running.add(func)  # a Tensor method's body calls the method's builtin,
            try:                    # which torch hands over as the method again
                with self:
                    return body(*args, **kwargs)
            finally:
                self.running.discard(func)
        key = (func, tuple((k, x.dtype) for k, x in enumerate(leaves)
                           if isinstance(x, torch.Tensor)), torch.get_autocast_dtype("cpu"))
        casts = self.plans.get(key)
        if casts is None:
            casts = self.plans[key] = self._ask_torch(func, leaves, args, kwargs)
        if casts:
            leaves = [x.to(casts[k]) if k in casts else x for k, x in enumerate(leaves)]
            args, kwargs = _unflatten(leaves, args, kwargs)
        return func(*args, **kwargs)

    @staticmethod
    def _ask_torch(func, leaves, args, kwargs) -> dict:
        """The casts torch's CPU autocast kernel makes for this call."""
        tensors = [k for k, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        probes = {k: _probe(leaves[k]) for k in tensors}
        recorder = _CastRecorder([probes[k] for k in tensors])
        p_leaves = [probes.get(k, x) for k, x in enumerate(leaves)]
        p_args, p_kwargs = _unflatten(p_leaves, args, kwargs)
        try:
            with recorder:
                func(*p_args, **p_kwargs)
        except _Reached:
            pass
        except Exception as exc:  # noqa: BLE001 - any failure: say so, never guess
            warnings.warn(f"lazyrt.torch: autocast could not determine torch's casts for "
                          f"{getattr(func, '__name__', func)} ({type(exc).__name__}: {exc}); "
                          "it runs on lazy tensors without autocast casts", stacklevel=4)
            return {}
        return {tensors[k]: dt for k, dt in recorder.casts.items()}


_enter = torch.amp.autocast_mode.autocast.__enter__
_exit = torch.amp.autocast_mode.autocast.__exit__


def _autocast_enter(self):
    out = _enter(self)
    if self.device == "cpu" and self._enabled and not torch._jit_internal.is_scripting() \
            and not any(isinstance(m, LazyAutocast)  # nested regions share the outer's mode
                        for m in torch.overrides._get_current_function_mode_stack()):
        mode = LazyAutocast()
        mode.__enter__()
        self._lazyrt_mode = mode
    return out


def _autocast_exit(self, exc_type, exc_val, exc_tb):
    mode = self.__dict__.pop("_lazyrt_mode", None)
    if mode is not None:
        mode.__exit__(exc_type, exc_val, exc_tb)
    return _exit(self, exc_type, exc_val, exc_tb)


def install():
    """Make CPU autocast regions apply to lazy tensors (``import lazyrt.torch`` does)."""
    torch.amp.autocast_mode.autocast.__enter__ = _autocast_enter
    torch.amp.autocast_mode.autocast.__exit__ = _autocast_exit
