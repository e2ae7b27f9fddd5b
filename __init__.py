"""This folder is a source checkout of lazyrt; the package is its ``lazyrt/`` folder.

When a clone is named ``lazyrt`` and a script beside it runs ``import lazyrt``,
Python finds this folder before the installed package. Without this file it
would import it as an empty namespace package ("module 'lazyrt' has no attribute
'tensor'"). With it, the installed lazyrt is loaded instead (an editable install
of this checkout included), and where none is installed the import fails saying
what happened and what to do. Under any other name this file does nothing.
"""


def _installed_lazyrt():
    """The spec of the lazyrt installed for this Python, looked up past this folder."""
    import importlib.machinery
    import os
    import sys
    here = os.path.abspath(__file__)
    beside = os.path.dirname(os.path.dirname(here))
    path = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != beside]
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder:
            spec = finder.find_spec("lazyrt", path)
        elif hasattr(finder, "find_spec"):
            try:
                spec = finder.find_spec("lazyrt", None)
            except Exception:  # a finder of another tool that cannot answer
                continue
        else:
            continue
        if spec is not None and spec.loader is not None and spec.origin \
                and os.path.abspath(spec.origin) != here:
            return spec
    return None


def _load_installed_lazyrt():
    import importlib.util
    import os
    import sys
    spec = _installed_lazyrt()
    if spec is None:
        checkout = os.path.dirname(os.path.abspath(__file__))
        raise ImportError(
            f"`import lazyrt` found {checkout}, a source checkout of lazyrt beside your "
            "script, not the lazyrt package, and no lazyrt is installed for this Python "
            f"({sys.executable}). Install it (`pip install -e {checkout}`), or run your "
            f"script with the checkout's environment (`make run` in {checkout} creates "
            f"{os.path.join(checkout, '.venv', 'bin', 'python')}), or move the script or "
            "the checkout so they are not in the same folder.", name="lazyrt")
    module = importlib.util.module_from_spec(spec)
    sys.modules["lazyrt"] = module  # the import returns what sys.modules holds at the end
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["lazyrt"]
        raise


if __name__ == "lazyrt":
    _load_installed_lazyrt()
