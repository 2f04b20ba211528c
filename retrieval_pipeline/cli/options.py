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
