"""`retrieval-pipeline` command line, one module per command. A command's module is imported
only when that command runs (or when `--help` lists them), so `evaluate` never loads `monitor`'s
live rules nor `compare`'s statistics; no command loads Dagster. DuckDB, pandas and the rest load
when a command runs."""

from __future__ import annotations

import importlib

import click

# command name -> (its module under retrieval_pipeline.cli, the click command in it)
COMMANDS: dict[str, tuple[str, str]] = {
    "sample": ("sample", "sample"),
    "evaluate": ("evaluate", "evaluate"),
    "monitor": ("monitor", "monitor"),
    "compare": ("compare", "compare"),
    "labels-from-clicks": ("labels_from_clicks", "labels_from_clicks"),
}


class _Commands(click.Group):
    """A group whose commands are imported by name when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"retrieval_pipeline.cli.{module}"), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Score recorded retrieval traces: NDCG, MRR, precision, recall, MAP."""
