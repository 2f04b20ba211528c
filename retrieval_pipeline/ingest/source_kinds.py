"""Every kind of trace source a user names, in one registry: what each looks like, and what it
opens as for ingestion (`warehouse.sources.raw_record_pieces` reads each opened kind).

A source is named by a string (a command line's TRACES, the Python `evaluate()`'s `traces`):

- `phoenix`, named `phoenix+http://HOST:PORT/PROJECT?day=YYYY-MM-DD` (or `phoenix+https://`):
  a `PhoenixDay`, the project's spans started that UTC day;
- `delta`, a folder or `s3://` URL holding `_delta_log/`: `DayBatches`, every row of the
  table's current version (not every Parquet file in the folder: older versions' stay there);
- `files`, anything else: files, folders and `s3://` URLs of `.jsonl`, `.jsonl.gz`, `.parquet`
  and OTLP/JSON span exports (told by content), as given.

A Phoenix project or a Delta table is read alone (one TRACES argument); files may be many. The
nightly's stores (`ingest.stores.open_store`, `ingest.phoenix.PhoenixStore`) serve a day of the
same kinds; a DataFrame or an Arrow table (the Python API) is its own kind, read as it is. The
matrix of sources, label sources and doors is docs/conformance.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import parse_qs, urlsplit

from retrieval_pipeline.ingest.delta import is_delta_table, read_delta_table, table_version
from retrieval_pipeline.ingest.filesystems import S3Settings, StoreError
from retrieval_pipeline.store import DayBatches

if TYPE_CHECKING:  # Phoenix's reader and the configuration load where a Phoenix day is named
    from retrieval_pipeline.config import PhoenixConfig
    from retrieval_pipeline.ingest.phoenix import PhoenixDay

PHOENIX_SCHEMES = ("phoenix+http://", "phoenix+https://")

# What a named source opens as: paths (files, folders, URLs), a Phoenix day, or record batches.
OpenedSource: TypeAlias = "list[str | Path] | PhoenixDay | DayBatches"


class SourceError(ValueError):
    """A source name that cannot be read as any kind; the message says why and how to name it."""


@dataclass(frozen=True)
class SourceKind:
    """One kind of trace source: its name, how a user names one (for messages and docs), whether
    a name is of this kind, and what it opens as (given the S3 settings and the `[phoenix]`
    section, which says what a Phoenix day's annotations give: `phoenix_day`)."""

    name: str
    named_as: str
    matches: Callable[[str | Path, S3Settings | None], bool]
    open: Callable[[str | Path, S3Settings | None, PhoenixConfig | None], OpenedSource]


def _is_phoenix(spec: str | Path, settings: S3Settings | None) -> bool:
    return isinstance(spec, str) and spec.lower().startswith(PHOENIX_SCHEMES)


def phoenix_day(spec: str, labels: PhoenixConfig | None = None) -> PhoenixDay:
    """`phoenix+http://HOST:PORT[/PREFIX]/PROJECT?day=YYYY-MM-DD` as the day it names, whose
    document annotations are read as labels as `labels` (the `[phoenix]` section; None: its
    defaults) says, as the nightly reads a Phoenix store's (docs/phoenix.md)."""
    parts = urlsplit(spec[len("phoenix+") :])
    prefix, _, project = parts.path.rstrip("/").rpartition("/")
    days = parse_qs(parts.query).get("day", [])
    example = "phoenix+http://127.0.0.1:6006/default?day=2026-12-01"
    if not parts.netloc or not project:
        raise SourceError(f"{spec}: name the server and the project, e.g. {example}")
    if len(days) != 1:
        raise SourceError(f"{spec}: give the UTC day to read as ?day=YYYY-MM-DD, e.g. {example}")
    try:
        day = date.fromisoformat(days[0])
    except ValueError:
        raise SourceError(f"{spec}: day={days[0]} is not a date (YYYY-MM-DD)") from None
    endpoint = f"{parts.scheme}://{parts.netloc}{prefix}"
    from retrieval_pipeline.config import PhoenixConfig
    from retrieval_pipeline.ingest.phoenix import PhoenixDay, PhoenixStore

    chosen = labels if labels is not None else PhoenixConfig()
    return PhoenixDay(PhoenixStore(endpoint, project, labels=chosen), day)


def _is_delta(spec: str | Path, settings: S3Settings | None) -> bool:
    return is_delta_table(spec, settings)


def _delta_batches(spec: str | Path, settings: S3Settings | None) -> DayBatches:
    try:
        url, version = table_version(spec, settings)
    except StoreError as exc:
        raise SourceError(str(exc)) from exc
    return DayBatches(
        f"Delta Lake table {url} version {version}", lambda: read_delta_table(url, settings)
    )


KINDS: tuple[SourceKind, ...] = (
    SourceKind(
        "phoenix",
        "phoenix+http://HOST:PORT/PROJECT?day=YYYY-MM-DD",
        _is_phoenix,
        lambda spec, settings, phoenix: phoenix_day(str(spec), phoenix),
    ),
    SourceKind(
        "delta",
        "a folder or s3:// URL holding _delta_log/",
        _is_delta,
        lambda spec, settings, phoenix: _delta_batches(spec, settings),
    ),
    SourceKind(
        "files",
        "files, folders or s3:// URLs of .jsonl, .jsonl.gz, .parquet or OTLP/JSON exports",
        lambda spec, settings: True,
        lambda spec, settings, phoenix: [spec],
    ),
)


def kind_of(spec: str | Path, settings: S3Settings | None = None) -> SourceKind:
    """The first kind whose test `spec` passes (files, when no other)."""
    return next(kind for kind in KINDS if kind.matches(spec, settings))


def open_sources(
    specs: Sequence[str | Path],
    settings: S3Settings | None = None,
    phoenix: PhoenixConfig | None = None,
) -> list[str | Path] | PhoenixDay | DayBatches:
    """What `specs` open as: one Phoenix day or Delta table, named alone, or the files named. A
    Phoenix day reads its document annotations as `phoenix` says (`phoenix_day`)."""
    if not specs:
        raise SourceError("no trace source given: nothing to score")
    kinds = [kind_of(spec, settings) for spec in specs]
    alone = [(spec, kind) for spec, kind in zip(specs, kinds, strict=True) if kind.name != "files"]
    if alone and len(specs) > 1:
        spec, kind = alone[0]
        raise SourceError(
            f"{spec}: a {kind.name} source is read alone; give it as the only trace source "
            f"(got {len(specs)})"
        )
    if alone:
        spec, kind = alone[0]
        return kind.open(spec, settings, phoenix)
    return list(specs)
