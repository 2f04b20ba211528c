"""Options shared by the scoring commands (`evaluate`, `compare`, `monitor`), defined once.

Only click is imported here, so each command's start-up stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def metrics_option(default: str) -> Decorator:
    return click.option(
        "--metrics",
        default=default,
        show_default=True,
        help="Comma-separated metric names (ir_measures spellings accepted).",
    )


gain_option: Decorator = click.option(
    "--gain",
    type=click.Choice(["exponential", "linear"]),
    default="exponential",
    show_default=True,
    help="nDCG gain: 2^grade - 1, or the grade (trec_eval).",
)

relevance_level_option: Decorator = click.option(
    "--relevance-level",
    type=float,
    default=1.0,
    show_default=True,
    help="Lowest grade that counts as relevant.",
)

judged_only_option: Decorator = click.option(
    "--judged-only",
    is_flag=True,
    default=False,
    help="Score condensed lists: retrieved documents without a label are removed before ranks "
    "are taken (judged@K still describes the list as served).",
)

gmax_option: Decorator = click.option(
    "--gmax",
    type=float,
    default=3.0,
    show_default=True,
    help="Top of the grade scale, for rbp@P (gain min(grade, gmax) / gmax) and err@K.",
)


class BadOption(click.ClickException):
    """An option value the command does not accept (a metric name, a number out of range, a
    threshold): one line, `Error: --metrics: ...`, and exit status 2, click's own for a bad
    option; raised before any record is read. Problems of files and data stay exit status 1."""

    exit_code = 2

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(f"{option}: {message}" if option else message)
