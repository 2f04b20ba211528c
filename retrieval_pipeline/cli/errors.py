"""What the commands do with a bad input: one line on standard error, exit code 1.

Every input error the readers raise is a `ValueError` (a bad record, option, file or source:
`TraceFileError`, `SourceError`, `MetricConfigError`, ...) or an `OSError` (a file or object
store that cannot be read: `filesystems.StoreError` names the URL and the cause). Each command
reads its inputs inside `input_errors()`, so that a store's failure is told the same way for
trace files as for judgments, never as a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

INPUT_ERRORS = (ValueError, OSError)


@contextmanager
def input_errors() -> Iterator[None]:
    """Re-raise an input error as a `click.ClickException` of one line (its whitespace, new
    lines included, made single spaces)."""
    try:
        yield
    except INPUT_ERRORS as exc:
        raise click.ClickException(one_line(exc)) from None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
