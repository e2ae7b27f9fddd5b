"""Profitability: :class:`FusionPolicy`, the decisions the fusion planner
(``fusion.py``) asks about each legal fusion, and the byte counts they weigh."""
from __future__ import annotations


class FusionPolicy:
    """Profitability: which legal fusions the planner takes. Each decision is a
    method or a field; change one in a subclass and the plan's ``refusals``
    say what it refused and why.

    Recomputing a shared producer inside each kernel that needs it saves
    writing and re-reading it (2 * bytes per element) at the price of its
    arithmetic; on a memory-bound machine that pays unless the producer is a
    long chain feeding many kernels.
    """
    #: most extra op evaluations per element that recomputing a shared producer
    #: may cost; None: no limit, every shared producer is recomputed (the plans
    #: the golden tests and benchmarks hold)
    max_recompute_ops: int | None = None
    #: longest chain of ops fused into one kernel; past it a value is stored.
    #: Bounds compile time and the planner's recursion on very long chains.
    max_fused_depth = 96

    #: least bytes a store must save to be worth it: below, the launch it may add
    #: costs more than moving the bytes (a few microseconds, at L2 bandwidth)
    min_bytes_saved = 256 * 1024

    def inline_shared(self, n_kernels: int, subtree_ops: int, read_bytes: float = 0.0,
                      value_bytes: float = 0.0) -> bool:
        """Whether a producer of ``subtree_ops`` ops (its own and those it
        computes from) that ``n_kernels`` kernels need is computed in each of
        them, rather than stored by one and loaded by the others.

        Computing it reads ``read_bytes`` of stored values (each value its subtree loads,
        in full) and storing it writes ``value_bytes`` once. Recomputed, the ``n`` kernels
        read ``n * read``; stored, one kernel reads ``read`` and writes the value, the
        others read the value: ``read + n * value``. It is stored where that saves
        ``min_bytes_saved`` or more: a residual stream of five adds, recomputed in every
        layer norm that reads it, read six tensors per pass where storing reads one."""
        if n_kernels <= 1:
            return True
        saved = (n_kernels - 1) * read_bytes - n_kernels * value_bytes
        if read_bytes and saved >= self.min_bytes_saved:
            return False
        return (self.max_recompute_ops is None
                or subtree_ops * (n_kernels - 1) <= self.max_recompute_ops)

    def merge_siblings(self, first, second) -> bool:
        """Whether two independent kernels (KernelSpecs) over one domain that read
        a common buffer run as one loop: it reads that buffer once and saves a
        launch, at no cost in memory traffic, so they do."""
        return True

    def fold_epilogue(self, epilogue) -> bool:
        """Whether the pointwise kernel (a KernelSpec) that alone reads a matmul's
        product runs in the matmul's epilogue, where the backend's matmul has
        one: the product is then never written or read back, so it does."""
        return True


def size_text(nbytes) -> str:
    """``1.57 MB``, ``262 kB``, ``512 B``: a byte count as a refusal's reason says it."""
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"
