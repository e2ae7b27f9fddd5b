"""Matrix products: ``matmul`` / ``@`` with NumPy's semantics.

1-D operands are promoted (a leading or trailing 1) and the extra axis is
dropped again; batch axes broadcast. The MATMUL op itself always sees two
operands of equal rank >= 2, which is what the planner and emitters assume.
The recording (checks, dtype, shapes) is in Cython: ``x @ w`` is as hot as
``x + b`` in a training step.
"""
from __future__ import annotations

from .. import _recorder_shapes as S

matmul = S.matmul
