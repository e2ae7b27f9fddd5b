"""The ``lazyrt`` command: ``lazyrt demo``, ``lazyrt --version``."""
from __future__ import annotations

import argparse
import sys


def _backend_name(name: str) -> str:
    """An argparse type: a backend usable here, else a one-line usage error."""
    import lazyrt
    try:
        lazyrt.backends.get(name)
    except lazyrt.BackendError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def main(argv=None) -> int:
    import lazyrt
    parser = argparse.ArgumentParser(prog="lazyrt", description="lazyrt: a LazyTensor runtime")
    parser.add_argument("--version", action="version", version=f"lazyrt {lazyrt.__version__}")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="record, capture, cache and run a small program")
    demo.add_argument("--backend", default=None, type=_backend_name, help="backend to run on (default: best here)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(args.backend)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
