"""The planning stage: a captured Graph in, a Plan of kernel specs out.

``fusion.py`` decides what fuses (legality in its kernel builder and the
backend's :class:`Capabilities`, profitability in :class:`FusionPolicy`, ``policy.py``)
and builds each kernel's ``KernelSpec`` (``kernel_ir.py``) over index maps
(``strided.py``); ``schedule.py`` holds the :class:`Plan` and its steps,
orders them, merges siblings, folds epilogues and records each
:class:`Refusal`; ``passes.py`` holds the rewrites every target needs. Backends import the
plan's step types from here and never the graph's ops.
"""
from .fusion import plan, plan_store
from .policy import FusionPolicy
from .schedule import (Buffer, BufferView, Capabilities, KernelStep, MatmulStep, OpaqueStep, Plan,
                       Refusal, matmul_operands)

__all__ = ["Buffer", "BufferView", "Capabilities", "FusionPolicy", "KernelStep", "MatmulStep",
           "OpaqueStep", "Plan", "Refusal", "matmul_operands", "plan", "plan_store"]
