"""The lowering modules: importing this package fills :mod:`..registry`'s tables.

Each submodule registers its rules with ``register_lowering`` (or
``register_barrier``, ``register_random``) as it is imported:

- ``barriers``: ``item()``, ``cpu()``, ``lift_fresh``;
- ``pointwise``: elementwise ops (generated from tables), ``where``, ``clamp``,
  ``_to_copy`` within the device; ``reductions``: ``sum``, ``mean``, ``var``...;
- ``creation``: ``ones_like``, ``fill``, ``copy``...; ``views``: views, splits,
  scatters, ``cat``; ``diagonal``: ``diagonal`` and its scatter;
- ``division``: rounded ``div``, ``remainder``, ``fmod``; ``matmul``: ``mm``,
  ``addmm``, ``bmm``...; ``activations``: the tanh/sigmoid/silu backwards;
- ``normalization``: softmax and layer norm; ``losses``: ``nll_loss``;
  ``indexing``: ``index``, ``gather``, scatters, ``sort``, ``cumsum``...;
- ``random``: random draws and dropout; ``fused_optim``: ``_fused_adam(w)``;
- ``convolution``: ``convolution`` and its backward, max/avg/adaptive pooling.
"""
from . import barriers, pointwise, reductions  # noqa: F401  (each registers its rules)
from . import activations, creation, diagonal, division, fused_optim  # noqa: F401
from . import indexing, losses, matmul, normalization, views  # noqa: F401
from . import convolution, random  # noqa: F401
