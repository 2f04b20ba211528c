"""`retrieval-pipeline labels-from-clicks`: impression logs in, debiased judgments out.

The work is `labels.command.labels_from_clicks` (docs/click-labels.md); this module reads the
options and prints what happened to every record."""

from __future__ import annotations

from pathlib import Path

import click


def _cut_points(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: three comma-separated numbers, e.g. 0.1,0.25,0.5"
        ) from None


@click.command("labels-from-clicks")
@click.argument("clicks", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Judgments file to write (.jsonl, .ndjson, .parquet or .csv).",
)
@click.option(
    "--propensities-out",
    type=click.Path(path_type=Path),
    required=True,
    help="PROPENSITIES.json: the examination propensity of each rank, relative to rank 1.",
)
@click.option(
    "--max-rank",
    type=int,
    default=10,
    show_default=True,
    help="Deepest rank counted; documents shown below it are not used.",
)
@click.option(
    "--min-impressions",
    type=int,
    default=20,
    show_default=True,
    help="Fewest impressions a (query, document) pair needs to be labelled; the others are left "
    "unjudged, not graded 0.",
)
@click.option(
    "--clip",
    type=float,
    default=0.1,
    show_default=True,
    help="Smallest propensity a click is divided by (weights at most 1 / clip).",
)
@click.option(
    "--cut-points",
    default="0.1,0.25,0.5",
    show_default=True,
    callback=_cut_points,
    help="Debiased click rates where grades 1, 2 and 3 begin.",
)
@click.option(
    "--quarantine",
    type=click.Path(path_type=Path),
    default=None,
    help="Records that could not be used, with their reasons (.jsonl).",
)
def labels_from_clicks(
    clicks: tuple[Path, ...],
    out: Path,
    propensities_out: Path,
    max_rank: int,
    min_impressions: int,
    clip: float,
    cut_points: tuple[float, ...],
    quarantine: Path | None,
) -> None:
    """Debias CLICKS (impression logs: files or folders of .jsonl, .ndjson, .parquet) for
    position and write graded judgments with label_source "clicks"."""
    from retrieval_pipeline.labels.clicks import ClickLabelError, ClickLabelOptions
    from retrieval_pipeline.labels.command import labels_from_clicks as run
    from retrieval_pipeline.labels.command import summary_lines

    try:  # an option out of its range is a usage error (exit 2), told before anything is read
        options = ClickLabelOptions(max_rank, min_impressions, clip, cut_points)
    except ClickLabelError as exc:  # the ranges are ClickLabelOptions' own, named as options
        words = str(exc)
        for name in ("max_rank", "min_impressions", "clip", "cut_points"):
            words = words.replace(f"{name} must", f"--{name.replace('_', '-')} must")
        raise click.UsageError(words) from None
    try:
        result = run(list(clicks), out, propensities_out, options, quarantine)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("\n".join(summary_lines(result)))
    click.echo(f"Judgments written to {out}, propensities to {propensities_out}.")
