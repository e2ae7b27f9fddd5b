"""The user's line of an FX node, as lazyrt's recorder and warnings name lines.

Dynamo keeps, per FX node, the stack of the user's code that produced it
(``node.meta["stack_trace"]``). The recorder takes a node's line from the
innermost frame that is not lazyrt's or torch's (:mod:`lazyrt._frames`), so a
lowering run from :func:`at_line` is run from a frame whose code belongs to the
user's file and stands at the user's line: every lazyrt node it records, its
kernels' comments, ``lazyrt explain`` and the fallback warnings then name the
line of the model that the FX node came from, as for the lazy front-end, and the
FX node itself (the code object is named after it).
"""
from __future__ import annotations

import functools
import re

from .._frames import is_internal

_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def frame_of(node):
    """``(file, line)`` of the innermost user frame behind FX ``node`` (not torch's
    or lazyrt's: :mod:`lazyrt._frames`' rule), or None (an op of ``torch.nn``'s own
    layers, whose user line is the call into the compiled model)."""
    trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    if not trace:
        return None
    for file, line in reversed(_FILE_LINE.findall(trace)):
        if not is_internal(file):
            return file, int(line)
    return None


def frame_line(node):
    """``"file:line"`` of FX ``node``'s user line, or None."""
    where = frame_of(node)
    return None if where is None else f"{where[0]}:{where[1]}"


@functools.lru_cache(maxsize=16384)
def _code_at(file: str, line: int, node_name: str):
    # a code object of ``file`` whose one call stands at ``line``, named after the FX
    # node (``source_line`` shows the name)
    code = compile("\n" * (line - 1) + "__lazyrt_call__()", file, "eval")
    return code.replace(co_name=f"<fx {node_name}>")


def at_line(node, fn, *args):
    """``fn(*args)``, called from a frame at FX ``node``'s user line (when known):
    what it records shows ``file:line (FX node NAME)``."""
    where = frame_of(node)
    if where is None:
        return fn(*args)
    return eval(_code_at(*where, node.name), {"__lazyrt_call__": lambda: fn(*args)})  # noqa: S307
