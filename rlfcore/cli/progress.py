"""Progress that shows in a terminal and in a log: rich bars on a TTY, else one flushed line per update.

Rich renders a bar once, at the end, when its output is not a terminal; a run redirected to a file
would look dead for its whole length. Off a terminal, every update is a plain line instead.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click


def on_terminal() -> bool:
    """Whether stdout is a terminal (bars) or a file or pipe (lines)."""
    return sys.stdout.isatty()


class Lines:
    """The off-terminal stand-in for a rich ``Progress``: a context manager that prints lines."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def line(self, text: str) -> None:
        click.echo(f"{text}  {time.perf_counter() - self.start:.1f} s")


def bars(*columns: Any) -> Any:
    """A rich Progress with ``columns``, on a TTY; :class:`Lines` elsewhere."""
    if not on_terminal():
        return Lines()
    from rich.progress import Progress

    return Progress(*columns)
