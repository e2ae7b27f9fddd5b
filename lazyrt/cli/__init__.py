"""The ``lazyrt`` command: see every graph, fusion decision and kernel a script
makes, explain every recompile, bisect a wrong result to its kernel.

    lazyrt run SCRIPT [ARGS...] [--dump DIR] [--trace FILE.json]
    lazyrt explain SCRIPT [--max-graphs N]     why each graph was compiled
    lazyrt kernels SCRIPT [--graph N] [--kernel NAME] [--bench]
    lazyrt graph SCRIPT --format text|dot|svg|png [--graph N]
    lazyrt check SCRIPT --backend c [--repro DIR]
    lazyrt cache info|list|verify|clear, lazyrt doctor, lazyrt bench, lazyrt demo

Everything they show is read from the compile record every backend returns
(:mod:`lazyrt.compile_record`) and from a watch on the run
(:mod:`lazyrt.observe`); ``lr.debug`` gives the same data in-process.
"""
from __future__ import annotations

import argparse
import sys

from .script import CommandError, UsageError

#: the options of the subcommands that run a script, which a user may also
#: write after the script's own arguments (``--`` ends them)
_SCRIPT_COMMANDS = ("run", "explain", "kernels", "graph", "check")


def _backend_name(name: str) -> str:
    """An argparse type: a backend usable here, else a one-line usage error."""
    import lazyrt
    try:
        lazyrt.backends.get(name)
    except lazyrt.BackendError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _command(sub, name, help, example, description=None):
    return sub.add_parser(name, help=help, description=description or help,
                          epilog=f"example:\n  {example}", allow_abbrev=False,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _script_args(p):
    p.add_argument("script", help="the Python script to run (as `python SCRIPT ARGS` would)")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="the script's arguments (after them, this command's options; "
                        "`--` passes everything after it to the script)")
    p.add_argument("--backend", type=_backend_name, default=None,
                   help="backend to run on (numpy, c, triton; default: the best here)")


def build_parser() -> argparse.ArgumentParser:
    import lazyrt
    parser = argparse.ArgumentParser(
        prog="lazyrt", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="lazyrt: a LazyTensor runtime. See what your tensor code compiled to, "
                    "why it recompiled, and which kernel is wrong.",
        epilog="examples:\n  lazyrt explain train.py --max-graphs 1\n"
               "  lazyrt kernels train.py --graph 1\n  lazyrt check train.py --backend c")
    parser.add_argument("--version", action="version", version=f"lazyrt {lazyrt.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _command(sub, "run", "run a script, optionally dumping every graph and a trace",
                 "lazyrt run train.py --epochs 2 --dump out/ --trace trace.json")
    _script_args(p)
    p.add_argument("--dump", metavar="DIR",
                   help="write one folder per distinct graph (graph, plan, kernels, sources) "
                        "and summary.json, metrics.txt, explain.txt")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write a Chrome/Perfetto trace: record, capture, plan, compile, run, "
                        "per graph and per kernel")

    p = _command(sub, "explain", "why each graph was compiled; what forced each barrier",
                 "lazyrt explain train.py --max-graphs 1")
    _script_args(p)
    p.add_argument("--max-graphs", type=_positive, metavar="N", default=None,
                   help="fail (exit 1, with the explanation) when the run needs more than N "
                        "distinct graphs (default: $LAZYRT_MAX_GRAPHS)")

    p = _command(sub, "kernels", "the generated kernels of each graph",
                 "lazyrt kernels train.py --graph 2 --kernel k0_fused_mul_add --bench")
    _script_args(p)
    p.add_argument("--graph", type=_positive, metavar="N", help="only graph N (1 = the first)")
    p.add_argument("--kernel", metavar="NAME", help="only kernels whose name contains NAME")
    p.add_argument("--bench", action="store_true",
                   help="time each kernel on random inputs of the recorded shapes (GB/s)")
    p.add_argument("--no-source", action="store_true", help="the table only, no source")

    p = _command(sub, "graph", "the captured graph with its fusion groups",
                 "lazyrt graph train.py --format svg --graph 1 -o graph.svg")
    _script_args(p)
    p.add_argument("--format", choices=("text", "dot", "svg", "png"), default="text")
    p.add_argument("--graph", type=_positive, metavar="N", help="only graph N (1 = the first)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write here (default: stdout for text and dot, graph-<N>.svg|png for "
                        "images; with several graphs, FILE gets -<N> before its suffix)")

    p = _command(sub, "check", "compare every graph with the numpy oracle; bisect a "
                 "wrong result to its kernel and op", "lazyrt check train.py --backend c "
                 "--repro repro/")
    _script_args(p)
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default per dtype: float32 1e-4)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default per dtype: float32 1e-5)")
    p.add_argument("--repro", metavar="DIR",
                   help="write a standalone reproduction of the first mismatch here")

    p = _command(sub, "cache", "the on-disk kernel cache: where, what, verify, clear",
                 "lazyrt cache verify --backend c")
    p.add_argument("action", choices=("info", "list", "verify", "clear"))
    p.add_argument("--backend", default=None, help="only this backend's entries")

    _command(sub, "doctor", "what this machine offers lazyrt, one line each",
             "lazyrt doctor",
             description="what this machine offers lazyrt, one line each: pass; skip (an "
                         "optional part absent here, such as a GPU); warn (works, slower); "
                         "FAIL (a part lazyrt needs is broken: the exit status is then 1)")

    p = _command(sub, "bench", "run the bench/ suites of a source checkout",
                 "lazyrt bench --suite cpu --json cpu.json --plot cpu.png")
    from .machine import BENCH_SUITES  # the parser is built only for a command line
    p.add_argument("--suite", choices=BENCH_SUITES + ("all",), default="record")
    p.add_argument("--json", metavar="F", help="results file")
    p.add_argument("--plot", metavar="F.png", help="bar chart")
    p.add_argument("--quick", action="store_true", help="shorter pauses between samples")

    p = _command(sub, "demo", "record, capture, cache and run a small program", "lazyrt demo")
    p.add_argument("--backend", default=None, type=_backend_name,
                   help="backend to run on (default: best here)")
    return parser


def _split_script_options(parser, args):
    """Options of this command written after the script's arguments belong to
    the command, unless a ``--`` came first."""
    rest = list(args.args)
    tail = []
    if "--" in rest:
        k = rest.index("--")
        rest, tail = rest[:k], rest[k + 1:]
    sub = parser._subparsers._group_actions[0].choices[args.command]
    mine = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for action in sub._actions:
        if action.option_strings and action.dest != "help":
            mine._add_action(action)
    known, extra = mine.parse_known_args(rest, namespace=args)
    known.args = extra + tail
    return known


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command in _SCRIPT_COMMANDS:
            args = _split_script_options(parser, args)
        return _dispatch(args)
    except UsageError as e:
        print(f"lazyrt {args.command}: error: {e}", file=sys.stderr)
        return 2
    except CommandError as e:
        print(f"lazyrt {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `lazyrt kernels x.py | head`
        return 0


def _dispatch(args) -> int:
    if args.command == "demo":
        from ..demo import run_demo
        return run_demo(args.backend)
    if args.command in ("run", "explain", "check"):
        from . import run
        return getattr(run, f"cmd_{args.command}")(args)
    if args.command in ("kernels", "graph"):
        from . import show
        return getattr(show, f"cmd_{args.command}")(args)
    from . import machine
    return getattr(machine, f"cmd_{args.command}")(args)


if __name__ == "__main__":
    sys.exit(main())
