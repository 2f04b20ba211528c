"""`retrieval-pipeline` command line, one module per command. Each imports only what it needs
(no Dagster): DuckDB, pandas and the rest load when a command runs."""

from __future__ import annotations

import click

from retrieval_pipeline.cli import compare, evaluate, monitor, sample


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Score recorded retrieval traces: NDCG, MRR, precision, recall, MAP."""


main.add_command(sample.sample)
main.add_command(evaluate.evaluate)
main.add_command(monitor.monitor)
main.add_command(compare.compare)
