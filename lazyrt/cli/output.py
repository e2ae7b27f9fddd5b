"""How the CLI writes: rich colour, tables and syntax on a terminal; plain,
aligned text when the output is piped or ``NO_COLOR`` is set."""
from __future__ import annotations

import os
import sys


def fancy(stream=None) -> bool:
    """Colour and boxes: only on a terminal, and never under ``NO_COLOR``."""
    stream = stream or sys.stdout
    return bool(stream.isatty()) and not os.environ.get("NO_COLOR")


def console(stderr: bool = False):
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, no_color=not fancy(stream), highlight=False,
                   soft_wrap=True, emoji=False)


def heading(text: str):
    if fancy():
        console().print(f"[bold cyan]{_escape(text)}[/bold cyan]")
    else:
        print(text)


def line(text: str = "", style: str | None = None):
    if style and fancy():
        console().print(f"[{style}]{_escape(text)}[/{style}]")
    else:
        print(text)


def table(columns: list, rows: list, title: str | None = None):
    """A table: rich on a terminal, aligned columns otherwise."""
    rows = [[str(c) for c in r] for r in rows]
    if fancy():
        from rich.table import Table
        t = Table(title=title)
        for i, c in enumerate(columns):
            t.add_column(c, justify="right" if i and _numeric(rows, i) else "left")
        for r in rows:
            t.add_row(*[_escape(c) for c in r])
        console().print(t)
        return
    if title:
        print(title)
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def source(text: str, language: str):
    """Generated source: highlighted on a terminal, verbatim otherwise."""
    if fancy() and language in ("c", "triton", "python"):
        from rich.syntax import Syntax
        lexer = "python" if language in ("triton", "python") else "c"
        console().print(Syntax(text.rstrip("\n"), lexer, theme="ansi_dark", word_wrap=True))
    else:
        print(text.rstrip("\n"))


def _numeric(rows, i) -> bool:
    return bool(rows) and all(r[i].replace(".", "", 1).replace(" ", "").rstrip("%msBkMG/")
                              .isdigit() for r in rows if r[i] not in ("", "-"))


def _escape(text: str) -> str:
    from rich.markup import escape
    return escape(text)
