"""The captured graph: the IR every backend compiles.

A :class:`Graph` is built from a recorder ``Capture`` only on a program-cache
miss. It holds structure alone — no user data — so a cached program can run
again on new parameters. Node ``i``'s inputs are indices of earlier nodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import dtypes as D
from . import ops
from ._source_lines import source_line


@dataclass(frozen=True)
class GNode:
    op: ops.OpDef
    dtype: int
    shape: tuple
    inputs: tuple
    attrs: object = None
    value: object = None       # a CONST's baked value; None otherwise
    #: where the user recorded it: (code object, bytecode offset), formatted
    #: only when shown (see :attr:`source`); not part of the structure
    origin: tuple = field(default=(None, 0), compare=False, repr=False)

    @property
    def dtype_name(self) -> str:
        return D.NAMES[self.dtype]

    @property
    def source(self):
        """``"file:line"`` of the user code that recorded this node, or None."""
        return source_line(*self.origin)


@dataclass(frozen=True)
class Graph:
    nodes: tuple
    params: tuple              # node indices of the parameters, in call order
    outputs: tuple             # node index of each requested output
    key: int

    @classmethod
    def from_capture(cls, cap) -> "Graph":
        nodes = tuple(
            GNode(ops.OPS[n.op], n.dtype, n.shape, tuple(ins), n.attrs,
                  n.value if n.op == ops.CONST.id else None,
                  (n.source_code, n.source_offset))
            for n, ins in zip(cap.nodes, cap.inputs))
        return cls(nodes, tuple(cap.params), tuple(cap.outputs), cap.key)

    @property
    def n_ops(self) -> int:
        return sum(1 for n in self.nodes if n.op.kind != ops.LEAF)

    def describe(self) -> str:
        """One line per node, with the user's line that recorded it:
        ``%3 = add(%1, %2) : float32[4, 4]  # train.py:12``."""
        param_pos = {p: i for i, p in enumerate(self.params)}
        outs = set(self.outputs)
        lines = [f"graph {self.key:016x}: {len(self.nodes)} nodes, "
                 f"{len(self.params)} params, {len(outs)} outputs"]
        for i, n in enumerate(self.nodes):
            ty = f"{n.dtype_name}{list(n.shape)}"
            if i in param_pos:
                rhs = f"param[{param_pos[i]}] ({n.op.name})"
            elif n.op is ops.CONST:
                rhs = f"const {n.value!r}"
            else:
                args = ", ".join(f"%{j}" for j in n.inputs)
                attrs = "" if n.attrs is None else f" {n.attrs}"
                rhs = f"{n.op.name}({args}){attrs}"
            mark = "  -> output" if i in outs else ""
            where = n.source
            lines.append(f"  %{i} = {rhs} : {ty}{mark}" + (f"  # {where}" if where else ""))
        return "\n".join(lines)
