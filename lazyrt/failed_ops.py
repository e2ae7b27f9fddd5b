"""What an op that fails on its data at a barrier leaves behind (an index out of
range): the :class:`FailedValue` its tensors hold, how a failure carries through a
captured graph, and how the error names the lines that recorded the checked ops.
The barrier that finds and binds failures is :mod:`lazyrt.runtime`'s."""
from __future__ import annotations

from . import ops
from ._source_lines import source_line


class FailedValue:
    """What a computed node holds when its value could not be computed: the error
    (its type, arguments and notes only: a traceback's frames would hold tensors,
    and nodes, outside the cycle collector, would then never be freed). NumPy's
    reading it (``host_value``, and so every host read) raises the error again."""

    __slots__ = ("kind", "args", "notes")
    alive = 0  # how many exist: while none does, a barrier tests nothing

    def __init__(self, error: BaseException):
        self.kind, self.args = type(error), error.args
        self.notes = tuple(getattr(error, "__notes__", ()))
        FailedValue.alive += 1

    def __del__(self):
        FailedValue.alive -= 1

    def error(self, again=True) -> BaseException:
        """A fresh copy of the error, noted as raised again unless ``again`` is false."""
        try:
            exc = self.kind(*self.args)
        except Exception:  # noqa: BLE001  a device runtime's error type built otherwise
            exc = IndexError(*self.args)
        if hasattr(exc, "add_note"):  # Python 3.11+
            for note in self.notes:
                exc.add_note(note)
            if again:
                exc.add_note("lazyrt: raised again: this tensor depends on the op that "
                             "failed at an earlier barrier; tensors that do not depend on "
                             "it compute as usual")
        return exc

    def __array__(self, dtype=None, copy=None):
        raise self.error()


def name_index_sites(exc, cap):
    """An index check failed while the graph of ``cap`` ran: note on ``exc`` the
    user's lines that recorded this run's ops of the kind checked (this run's, not
    the compile record's: the same graph recorded from other lines shares one
    program), so an error raised at a barrier still points at the call that caused it."""
    message = str(exc)
    kind = next((op for op, name in ops.CHECKED_NAMES.items()
                 if message.startswith(name + ":")), None)
    if kind is None or not hasattr(exc, "add_note"):  # add_note: 3.11+
        return
    sites = sorted({source_line(n.source_code, n.source_offset) or "" for n in cap.nodes
                    if ops.OPS[n.op].name == kind} - {""})
    if sites:
        exc.add_note(f"lazyrt: this graph's {kind} ops were recorded at {', '.join(sites)}")


def carry(cap, carried=None) -> list:
    """Per captured node, the failure of its first input that has one (``carried``:
    those known already; else the failed parameters'); ``cap.nodes`` is in
    topological order."""
    if carried is None:
        carried = [None] * len(cap.nodes)
        for k, i in enumerate(cap.params):
            if type(cap.values[k]) is FailedValue:
                carried[i] = cap.values[k]
    for i, ins in enumerate(cap.inputs):
        if carried[i] is None:
            for j in ins:
                if carried[j] is not None:
                    carried[i] = carried[j]
                    break
    return carried


#: the ops whose index range is checked when they run (gather, scatter_add)
CHECKED_OPS = frozenset(op.id for op in ops.OPS if op.name in ops.CHECKED_NAMES)
_CHECKED_MESSAGES = tuple(f"{name}: " for name in ops.CHECKED_NAMES.values())


def index_out_of_range(exc) -> bool:
    """Whether ``exc`` is a range check's error: its IndexError, or (on ``jax``, whose
    check runs in a host callback) the device runtime's error that carries it."""
    text = str(exc)
    return "out of range" in text and any(m in text for m in _CHECKED_MESSAGES)
