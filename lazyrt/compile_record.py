"""The compile record: what one compile of one graph did, on any backend.

Every backend compiles through :func:`lazyrt.backends.base.compile_graph`,
which returns a :class:`CompileRecord` next to the program (and attaches it
as ``program.record``). It holds the graph (each node with the user's source
line), the plan with every fusion decision and its reason, and one
:class:`KernelRecord` per launch: name, fused ops, source, compile time and
cache outcome.

Everything that shows a compile reads the record, so they agree on every
backend: ``LAZYRT_DEBUG`` prints :func:`format_record`, ``LAZYRT_DUMP_DIR``
writes :func:`dump_record`, and :func:`lazyrt.debug.last_record` hands it
to code (the CLI). The record is built once per compile, never per run; the
graph and plan texts are formatted only when shown.

>>> import numpy as np, lazyrt as lr
>>> y = lr.tensor(np.ones(4, "float32")) * 2 + 1
>>> _ = y.numpy()
>>> record = lr.debug.last_record()
>>> record.graph_key == lr.debug.last_record().graph.key, len(record.kernels) >= 1
(True, True)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

#: cache outcomes of a kernel
COMPILED = "compiled"        # built from source by this compile
DISK = "disk cache"          # found in lazyrt's on-disk cache
MEMORY = "memory"            # already loaded in this process
NOT_COMPILED = "-"           # nothing to compile: a library call, a host step, an op run by NumPy

_EXTENSIONS = {"c": ".c", "triton": ".py", "jax": ".py"}
_NAME_COMMENT = {"c": "/* {} */", "triton": "# {}", "jax": "# {}"}
#: the file a kernel's lowered IR is dumped to, by language
_IR_EXTENSIONS = {"jax": ".stablehlo.mlir"}


class KernelRecord(NamedTuple):
    """One launch of a program, as compiled (immutable; a NamedTuple because
    the numpy backend makes one per op, 100k for a long graph)."""
    name: str                 # k3_fused_mul_add_relu: the name in the plan and in debug lines
    ops: tuple                # the op names it runs, in body order
    comment: str = ""         # the kernel's header comment: fused ops and the user's lines
    source: str = ""          # the generated source ('' for a library call or host step)
    language: str = ""        # "c", "triton" ('' when there is no source)
    compile_s: float = 0.0    # emit + compile (or load) time
    cache: str = NOT_COMPILED  # COMPILED, DISK, MEMORY or NOT_COMPILED
    bytes_moved: int = 0      # minimal bytes one launch reads and writes (for GB/s)
    ir: str = ""              # what the compiler lowered it to, where it says (JAX: StableHLO)
    resources: tuple = ()     # per AOT target: registers, shared memory, spills (Triton)
    log: str = ""             # the compile command and the compiler's messages, when it compiled


@dataclass(frozen=True)
class CompileRecord:
    """One graph's compile: graph, plan and kernels (see the module docstring)."""
    backend: str
    device: str
    graph: object = field(repr=False)   # lazyrt.graph.Graph
    plan: object = field(repr=False)    # an object with describe(): the fusion plan
    kernels: tuple = ()                 # KernelRecord per launch, in run order
    compile_s: float = 0.0              # the whole compile: plan, emit, compile, load

    @property
    def graph_key(self) -> int:
        return self.graph.key

    @property
    def graph_text(self) -> str:
        """The graph, one node per line, with the user's source line."""
        return self.graph.describe()

    @property
    def plan_text(self) -> str:
        """The plan, with the reason for every buffer (fusion decision)."""
        return self.plan.describe()

    @property
    def fusion_decisions(self) -> tuple:
        """(node, reason) for every value that got its own buffer."""
        return tuple(getattr(self.plan, "unfused", ()))

    @property
    def fusion_refusals(self) -> tuple:
        """A :class:`lazyrt.planner.Refusal` (kind, nodes, steps, reason) for every
        fusion the plan did not take: why two parts run apart."""
        return tuple(getattr(self.plan, "refusals", ()))

    def __str__(self) -> str:
        """Everything ``LAZYRT_DEBUG=4`` prints: kernels, graph, plan, sources."""
        return format_record(self, 4)

    def _repr_html_(self) -> str:
        """The same text in a notebook."""
        import html
        return f"<pre>{html.escape(str(self))}</pre>"

    def kernel(self, name: str) -> KernelRecord:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"lazyrt: no kernel {name!r} in graph {self.graph_key:016x}; "
                       f"kernels: {[k.name for k in self.kernels]}")


def _kernel_line(k: KernelRecord) -> str:
    what = k.comment or ", ".join(k.ops) or "-"
    used = "".join(f"\n  {'':<40s} {r}" for r in k.resources)
    return f"  {k.name:<40s} {k.cache:<10s} {k.compile_s * 1e3:9.3f} ms  {what}{used}"


def format_record(record: CompileRecord, level: int) -> str:
    """The record as ``LAZYRT_DEBUG=level`` shows it ('' below level 2):

    2: a header line and one line per kernel (cache outcome, compile time, what it fuses)
    3: and the graph, with source lines, and the plan with the reason for each buffer
    4: and each kernel's source
    """
    if level < 2:
        return ""
    lines = [f"[lazyrt] compiled graph {record.graph_key:016x} on {record.backend} "
             f"({record.device}): {len(record.kernels)} kernels in "
             f"{record.compile_s * 1e3:.3f} ms", "kernels:"]
    lines += [_kernel_line(k) for k in record.kernels]
    if level >= 3:
        lines += [record.graph_text, record.plan_text]
    if level >= 4:
        lines.append("sources:")
        shown = 0
        for k in record.kernels:
            if k.source:
                lines += [f"--- {k.name} ({k.language}) ---", k.source.rstrip("\n")]
                shown += 1
            if k.ir:
                lines += [f"--- {k.name} (lowered) ---", k.ir.rstrip("\n")]
        if not shown:
            lines.append(f"  (no generated source: the {record.backend} backend runs "
                         "library code for every step)")
    return "\n".join(lines)


def dump_record(record: CompileRecord, root: str) -> str:
    """Write the record into ``root/<graph key>/`` and return that folder:
    ``graph.txt``, ``plan.txt``, ``kernels.txt`` (the level-2 table), one
    source file per generated kernel (``<name>.c``, ``<name>.py``), its lowered
    IR where the compiler gives one, and ``<name>.log`` for each kernel this
    compile built (the command and the compiler's messages)."""
    folder = os.path.join(root, f"{record.graph_key:016x}")
    os.makedirs(folder, exist_ok=True)
    files = {"graph.txt": record.graph_text, "plan.txt": record.plan_text,
             "kernels.txt": "\n".join(
                 [f"{record.backend} ({record.device}), compiled in "
                  f"{record.compile_s * 1e3:.3f} ms"] +
                 [_kernel_line(k) for k in record.kernels])}
    for k in record.kernels:
        if k.source:
            head = _NAME_COMMENT.get(k.language, "# {}").format(k.name)
            files[k.name + _EXTENSIONS.get(k.language, ".txt")] = f"{head}\n{k.source}"
        if k.ir:
            files[k.name + _IR_EXTENSIONS.get(k.language, ".ir.txt")] = k.ir
        if k.log:
            files[k.name + ".log"] = k.log
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    return folder
