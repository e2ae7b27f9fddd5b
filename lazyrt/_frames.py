"""Which frame is the user's: the one rule behind every "your line" lazyrt shows.

A frame is lazyrt's own when its file lies under lazyrt's package (and, in a
source checkout, its ``codegen/`` and ``kernels/`` folders beside it, which a
wheel installs inside the package), or is ``contextlib``'s (the exit of ``with
lr.backend(...)`` runs through it), or lies under a folder :func:`skip_folder`
added: ``lazyrt.torch`` adds torch's package (``torch/``, not ``torchvision/``),
so the user's line is their model or training code, not ``torch/nn/...``.
``lazyrt/demo.py`` is the exception: it is a script, run as a user's would be.

The user's frame is the innermost frame that is not lazyrt's own. The recorder
(:mod:`lazyrt._source_lines`, in C, caching the answer per code object), the
metrics, the torch front-end, performance warnings and ``lazyrt explain`` all
ask this module, so they name the same line.

This module imports nothing of lazyrt: everything else sits above it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings


def _folder(path: str) -> str:
    """``path`` absolute and ending in a separator: ``torch/`` must not match ``torchvision/``."""
    return os.path.join(os.path.abspath(path), "")


_PACKAGE = _folder(os.path.dirname(__file__))
_CHECKOUT = os.path.dirname(os.path.dirname(_PACKAGE))


def _own_folders() -> tuple:
    own = [_PACKAGE]
    # a source checkout (editable install, PYTHONPATH) keeps codegen/ and kernels/ at its
    # root; lazyrt_math.h tells lazyrt's kernels/ from another package's folder of that name
    if os.path.isfile(os.path.join(_CHECKOUT, "kernels", "lazyrt_math.h")):
        own += [_folder(os.path.join(_CHECKOUT, "codegen")),
                _folder(os.path.join(_CHECKOUT, "kernels"))]
    return tuple(own)


OWN_FOLDERS = _own_folders()
_CONTEXTLIB = os.path.abspath(contextlib.__file__)
_SCRIPTS = frozenset({os.path.join(_PACKAGE, "demo.py")})  # lazyrt's files run as a user's

_skipped: tuple = OWN_FOLDERS
_known: dict = {}          # file name -> whether it is lazyrt's own (or a skipped folder's)
_listeners: list = []      # called when a folder is added: caches built on the rule


def skip_folder(path: str) -> None:
    """Count frames of files under the folder ``path`` as lazyrt's own from now
    on (``lazyrt.torch`` adds torch's package)."""
    global _skipped
    path = _folder(path)
    if path in _skipped:
        return
    _skipped = _skipped + (path,)
    _known.clear()
    for clear in _listeners:
        clear()


def on_change(clear) -> None:
    """Call ``clear()`` whenever :func:`skip_folder` changes the rule."""
    _listeners.append(clear)


def is_internal(filename: str) -> bool:
    """Whether a frame of file ``filename`` is lazyrt's own (never the user's line)."""
    internal = _known.get(filename)
    if internal is None:
        internal = filename not in _SCRIPTS and (
            filename.startswith(_skipped) or filename == _CONTEXTLIB)
        if len(_known) > 65536:  # generated code without end: start over
            _known.clear()
        _known[filename] = internal
    return internal


def is_lazyrt(filename: str) -> bool:
    """Whether ``filename`` is lazyrt's own code (not torch's, not the user's)."""
    return filename not in _SCRIPTS and filename.startswith(OWN_FOLDERS)


def user_frame(frame=None):
    """The innermost user's frame at or outside ``frame`` (default: the caller's),
    or None when every frame is lazyrt's own."""
    f = frame if frame is not None else sys._getframe(1)
    while f is not None and is_internal(f.f_code.co_filename):
        f = f.f_back
    return f


def warn(message: str, category=UserWarning) -> None:
    """``warnings.warn(message, category)`` shown at the user's line rather than
    at lazyrt's (or torch's), with the user's module and warning registry, so
    filters and "once per line" behave as for a warning raised there."""
    f = user_frame(sys._getframe(1))
    if f is None:
        warnings.warn(message, category, stacklevel=2)
        return
    warnings.warn_explicit(message, category, f.f_code.co_filename, f.f_lineno,
                           module=f.f_globals.get("__name__"),
                           registry=f.f_globals.setdefault("__warningregistry__", {}))
