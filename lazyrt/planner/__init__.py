"""The planning stage: a captured Graph in, a Plan of kernel specs out.

``fusion.py`` decides what fuses (legality in its kernel builder,
profitability in :class:`FusionPolicy`) and builds each kernel's
``KernelSpec`` (``kernel_ir.py``) over index maps (``strided.py``);
``schedule.py`` orders the steps, merges siblings and folds epilogues;
``passes.py`` holds the rewrites every target needs. Backends import the
plan's step types from here and never the graph's ops.
"""
from .fusion import FusionPolicy, Plan, plan
from .schedule import Buffer, BufferView, KernelStep, MatmulStep, OpaqueStep

__all__ = ["Buffer", "BufferView", "FusionPolicy", "KernelStep", "MatmulStep", "OpaqueStep",
           "Plan", "plan"]
