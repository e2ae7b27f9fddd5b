"""Running a user's script as ``python SCRIPT ARGS`` would, under a watch.

``sys.argv`` is the script and its arguments, its folder comes first on
``sys.path``, it runs as ``__main__``, and its exit code is the command's. An
exception the script raises is printed as Python prints it, from the
script's first frame down (none of the CLI's frames), and exits 1.
"""
from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
from dataclasses import dataclass

_HERE = os.path.dirname(os.path.abspath(__file__))


class UsageError(Exception):
    """A mistake on the command line: printed as one line, exit status 2."""


class CommandError(Exception):
    """The command cannot do what was asked (a tool missing...): one line, exit 1."""


@dataclass
class Outcome:
    code: int                      # the exit status the script asked for
    error: BaseException | None    # what it raised, if anything


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def _user_traceback(exc: BaseException, script: str):
    """The traceback from the script's first frame (the CLI's and runpy's dropped)."""
    tb = exc.__traceback__
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename != script:
        first = first.tb_next
    traceback.print_exception(type(exc), exc, first or tb, file=sys.stderr)


def run_script(script: str, args=(), watcher=None, stdout_to_stderr=False,
               expected=()) -> Outcome:
    """Run ``script`` with ``args``, with ``watcher`` watching every barrier.

    ``stdout_to_stderr``: the script's prints go to stderr (the command's own
    report owns stdout). Exceptions in ``expected`` are returned, not printed.
    """
    from .. import runtime
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise UsageError(f"no such script: {script}")
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script] + list(args)
    sys.path[0:1] = [os.path.dirname(path)]  # where python would put the script's folder
    previous = runtime.watch(watcher) if watcher is not None else None
    redirect = contextlib.redirect_stdout(sys.stderr) if stdout_to_stderr \
        else contextlib.nullcontext()
    try:
        with redirect:
            runpy.run_path(path, run_name="__main__")
        return Outcome(0, None)
    except SystemExit as e:
        return Outcome(_exit_code(e.code), None)
    except expected as e:
        return Outcome(1, e)
    except KeyboardInterrupt as e:
        print("KeyboardInterrupt", file=sys.stderr)
        return Outcome(130, e)
    except Exception as e:
        _user_traceback(e, path)
        return Outcome(1, e)
    finally:
        sys.stdout.flush()
        sys.argv, sys.path[:] = saved_argv, saved_path
        if watcher is not None:
            runtime.watch(previous)
