"""The user's line of an FX node, as lazyrt's recorder and warnings name lines.

Dynamo keeps, per FX node, the stack of the user's code that produced it
(``node.meta["stack_trace"]``). The recorder takes a node's line from the
innermost frame that is not lazyrt's or torch's (:mod:`lazyrt._frames`), so a
lowering run from :func:`at_line` is run from a frame whose code belongs to the
user's file and stands at the user's line: every lazyrt node it records, its
kernels' comments, ``lazyrt explain`` and the fallback warnings then name the
line of the model that the FX node came from, as for the lazy front-end.
"""
from __future__ import annotations

import functools
import re

_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def frame_of(node):
    """``(file, line)`` of the innermost user frame behind FX ``node``, or None."""
    trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    if not trace:
        return None
    found = _FILE_LINE.findall(trace)
    if not found:
        return None
    file, line = found[-1]
    return file, int(line)


def frame_line(node):
    """``"file:line"`` of FX ``node``'s user line, or None."""
    where = frame_of(node)
    return None if where is None else f"{where[0]}:{where[1]}"


@functools.lru_cache(maxsize=4096)
def _code_at(file: str, line: int):
    # a code object of ``file`` whose one call stands at ``line``
    return compile("\n" * (line - 1) + "__lazyrt_call__()", file, "eval")


def at_line(node, fn, *args):
    """``fn(*args)``, called from a frame at FX ``node``'s user line (when known)."""
    where = frame_of(node)
    if where is None:
        return fn(*args)
    return eval(_code_at(*where), {"__lazyrt_call__": lambda: fn(*args)})  # noqa: S307
