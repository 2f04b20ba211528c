"""`retrieval-pipeline sample`: write the bundled sample trace store."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory to write the trace store into (created if missing).",
)
@click.option(
    "--days",
    type=click.IntRange(min=1),
    default=14,
    show_default=True,
    help="Number of daily partitions, ending yesterday (UTC).",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Random seed.")
@click.option(
    "--end-date",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Last day to generate (default: yesterday, UTC).",
)
def sample(out_dir: Path, days: int, seed: int, end_date: object) -> None:
    """Write a realistic sample trace store (traces, corpus, one injected regression)."""
    from retrieval_pipeline.sample import write_sample_store

    summary = write_sample_store(
        out_dir,
        days=days,
        seed=seed,
        end_date=end_date.date() if end_date else None,  # type: ignore[attr-defined]
    )
    click.echo(summary)
