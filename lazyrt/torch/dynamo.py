"""``torch.compile(model, backend="lazyrt")``: Dynamo captures the Python, AOTAutograd
hands over functionalized aten graphs (forward, backward, an optimizer step), and
each graph is recorded once into lazyrt programs and replayed on every call
(:mod:`.fx_program`), behind Dynamo's guards: no per-op Python after the first call.

>>> import torch
>>> f = torch.compile(lambda x: (x * 2 + 1).relu().sum(), backend="lazyrt")
>>> f(torch.arange(-2.0, 3.0)).item()
9.0

``backend="lazyrt"`` is found through the ``torch_dynamo_backends`` entry point, so
user code need not import lazyrt; :data:`compile_backend` is the same backend as an
object, and :func:`backend` makes one with options (which lazyrt backend runs it).

The tensors stay the user's own (CPU; the programs read them in place and write
mutated inputs back). Numerics follow eager torch, as ``lazyrt.torch`` does (one
aten registry: the same lowerings, decompositions and opmath rules).
"""
from __future__ import annotations

import torch
from functorch.compile import min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd
from torch.nn.attention import SDPBackend, sdpa_kernel

from .. import backends, runtime
from . import dispatch as _dispatch
from .fx_program import record
from .lowerings.pointwise import fused_multiply_add_op
from .registry import LOWERINGS, register_lowering

# the prim exists once torch._inductor.inductor_prims is loaded (functorch.compile does)
register_lowering(torch.ops.prims.fma.default)(fused_multiply_add_op)

__all__ = ["backend", "compile_backend", "CompiledGraph"]


def _lowered(op) -> bool:
    """Whether lazyrt lowers ``op``, or, for an in-place op (which functionalization
    turns into its out-of-place twin), that twin: ``addcmul_`` must reach the graph
    as ``addcmul``, not as torch's decomposition of it (a ``prims.fma``)."""
    if op in LOWERINGS:
        return True
    twin = _dispatch.out_of_place(op) if op._schema.name.endswith("_") else None
    return twin is not None and twin in LOWERINGS


def _decompositions() -> dict:
    # the lazy front-end's table, less what lazyrt lowers itself (a lowering that
    # declines some forms still decomposes them when the graph is recorded)
    return {op: fn for op, fn in _dispatch.DECOMPOSITIONS.items() if not _lowered(op)}


def _signature(args, dynamic):
    """What a recording is specialized to, beyond what Dynamo's guards fix: the
    integer inputs (symbolic sizes) and the shapes of the tensors."""
    if not dynamic:
        return None
    return tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)


class CompiledGraph:
    """One AOTAutograd graph (forward, backward or inference), recorded on its
    first call per signature and replayed after (boxed: called with a list)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, device, allow_eager=True):
        off = sorted({str(a.device) for a in example_inputs
                      if isinstance(a, torch.Tensor) and a.device.type != "cpu"})
        if off:
            raise NotImplementedError(
                f"lazyrt (torch.compile): this graph's inputs are on {', '.join(off)}; the "
                f"lazyrt backend takes CPU tensors (its programs read them in place). Move "
                f"the model and inputs to the CPU, or use another torch.compile backend")
        self.gm = gm
        self.device = device
        self.allow_eager = allow_eager
        # Dynamo's guards fix every shape of a static graph; a dynamic one has
        # integer (SymInt) inputs or symbolic sizes, and is specialized per signature
        self.dynamic = any(not isinstance(a, torch.Tensor) or any(
            not isinstance(s, int) for s in a.shape) for a in example_inputs)
        self.replays: dict = {}
        self.static = None  # the one replay of a static graph, once recorded

    def __call__(self, args):
        replay = self.static
        if replay is not None:  # the steady path of a static graph: Dynamo guarded it
            return replay.run(args)
        args = list(args)
        key = _signature(args, self.dynamic)
        replay = self.replays.get(key)
        if replay is not None:
            return replay.run(args)
        name = self.device or runtime.current_backend_name()  # `with lr.backend(...)` too
        runtime.sync()  # pending lazy tensors stay out of this graph's programs
        replay, out = record(self.gm, args, name, self.allow_eager)
        self.replays[key] = replay
        if not self.dynamic:
            self.static = replay
        return out


class LazyrtBackend:
    """A ``torch.compile`` backend: AOTAutograd around :class:`CompiledGraph`."""

    def __init__(self, device=None, allow_eager=True):
        if device is not None:
            backends.get(device)  # fail now, naming why it is unusable
        self.device = device
        self.allow_eager = allow_eager
        compiler = self._compile
        self._aot = aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                                 inference_compiler=compiler,
                                 decompositions=_decompositions(),
                                 partition_fn=min_cut_rematerialization_partition,
                                 keep_inference_input_mutations=True)

    def _compile(self, gm, example_inputs):
        compiled = CompiledGraph(gm, example_inputs, self.device, self.allow_eager)
        compiled._boxed_call = True  # AOTAutograd hands it the list of inputs as it is
        return compiled

    def __call__(self, gm, example_inputs, **kwargs):
        # attention as its math (the lazy device's choice too): autograd then derives
        # its backward from lowered ops, where the CPU's flash kernel has a backward
        # op of its own that lazyrt would run eagerly
        with sdpa_kernel([SDPBackend.MATH]):
            return self._aot(gm, example_inputs, **kwargs)

    def __repr__(self):
        return f"lazyrt.torch.backend(device={self.device!r}, allow_eager={self.allow_eager})"


def backend(device: str | None = None, *, allow_eager: bool = True) -> LazyrtBackend:
    """A ``torch.compile`` backend running on lazyrt backend ``device`` (``"c"``,
    ``"triton"``, ``"jax"``, ``"numpy"``; default: lazyrt's default backend).
    ``allow_eager=False``: an aten op lazyrt cannot lower raises when its graph is
    first called (naming the op, its FX node and the user's line) instead of
    running eagerly between lazyrt programs (counted and warned).

    >>> import torch, lazyrt.torch as lt
    >>> f = torch.compile(lambda x: x.exp().sum(), backend=lt.backend(device="numpy"))
    >>> round(f(torch.zeros(3)).item(), 3)
    3.0
    """
    return LazyrtBackend(device, allow_eager)


#: ``torch.compile(model, backend=lazyrt.torch.compile_backend)``: lazyrt's default
#: backend; what ``backend="lazyrt"`` names
compile_backend = LazyrtBackend()
