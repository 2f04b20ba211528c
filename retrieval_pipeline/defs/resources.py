"""Resources: the trace store, the DuckDB warehouse and the pipeline's settings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb
from dagster_duckdb import DuckDBResource

from retrieval_pipeline import environment
from retrieval_pipeline.config import PipelineConfig, load_config
from retrieval_pipeline.ingest.phoenix import PhoenixStore
from retrieval_pipeline.ingest.span_pieces import SpanReading
from retrieval_pipeline.ingest.stores import open_store
from retrieval_pipeline.store import TraceStore
from retrieval_pipeline.warehouse.connection import (
    UnreadableDatabaseError,
    connect,
    duckdb_config,
)
from retrieval_pipeline.warehouse.merged_days import FOLDER_SUFFIX

DB_ENV = "RETRIEVAL_PIPELINE_DB"
STORE_ENV = "RETRIEVAL_PIPELINE_STORE"
REPORTS_ENV = "RETRIEVAL_PIPELINE_REPORTS"
APPROVALS_ENV = "RETRIEVAL_PIPELINE_APPROVALS"
STORE_IDS_ENV = "RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS"
PHOENIX_ENDPOINT_ENV = "RETRIEVAL_PIPELINE_PHOENIX_ENDPOINT"
PHOENIX_PROJECT_ENV = "RETRIEVAL_PIPELINE_PHOENIX_PROJECT"
DEFAULT_DB = "data/warehouse.duckdb"
DEFAULT_STORE = "data/store"


def store_retrieved_ids() -> bool:
    """$RETRIEVAL_PIPELINE_STORE_RETRIEVED_IDS as a yes or no (unset: yes)."""
    return environment.store_retrieved_ids()


class TraceStoreResource(dg.ConfigurableResource):
    """Where traces come from: a local folder (`store.LocalTraceStore`), an `s3://` URL with the
    same layout, or either whose `traces/` is a Delta Lake table (`ingest.stores.open_store`;
    the object store's endpoint and credentials from the usual AWS variables).

    Span exports among a day's files are read through `config_path`'s `[trace_format]`. With
    `phoenix_endpoint` and `phoenix_project` the store is a Phoenix server instead
    (`ingest.phoenix.PhoenixStore`): a day is that project's spans started in it, read through
    the Phoenix client (the `phoenix` extra). Another store (a database, an observability
    export) is a subclass that overrides `get_store()` to return its own `TraceStore`; no asset
    changes."""

    root: str
    phoenix_endpoint: str | None = None
    phoenix_project: str | None = None
    # the pipeline's config file, whose [trace_format] maps span attributes onto record fields
    # (None: the defaults); `build_defs` gives it the settings' path
    config_path: str | None = None

    def pipeline_config(self) -> PipelineConfig:
        return load_config(self.config_path) if self.config_path else PipelineConfig()

    def span_reading(self) -> SpanReading:
        """How the day's spans become records (the first stage is what the nightly scores)."""
        return SpanReading(self.pipeline_config().trace_format)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A local store's folder must exist before a step starts: told in one line naming the
        variable and the folder tried, and before the warehouse writes anything."""
        problem = self.missing_folder()
        if problem is not None:
            raise dg.Failure(description=problem)

    def missing_folder(self) -> str | None:
        """What is wrong when the store is a local folder that does not exist (None: it exists,
        or the store is an object store or a Phoenix server)."""
        if self.phoenix_endpoint or self.phoenix_project or "://" in self.root:
            return None
        folder = Path(self.root).expanduser().absolute()
        if folder.is_dir():
            return None
        return (
            f"the trace store folder {folder} does not exist: set {STORE_ENV} to your store's "
            f"folder (or run from the folder that holds {self.root}; `retrieval-pipeline sample "
            f"--out {self.root}` writes a sample store there)"
        )

    def get_store(self) -> TraceStore:
        if self.phoenix_endpoint or self.phoenix_project:
            if not (self.phoenix_endpoint and self.phoenix_project):
                raise dg.Failure(
                    description="a Phoenix trace store needs both an endpoint and a project "
                    f"({PHOENIX_ENDPOINT_ENV}, {PHOENIX_PROJECT_ENV})"
                )
            # its document annotations are labels, as `[phoenix]` says (docs/phoenix.md)
            labels = self.pipeline_config().phoenix
            return PhoenixStore(self.phoenix_endpoint, self.phoenix_project, labels=labels)
        return open_store(self.root)


class WarehouseResource(DuckDBResource):
    """The DuckDB warehouse file: its folder is created when a step first connects (a missing
    folder would make every connect retry for about 100 s; a run that fails before, on a missing
    trace store say, leaves nothing behind), and every connection is opened by the
    warehouse (`warehouse.connection.connect`: its row groups, a UTC session, the tables and
    macros).

    `compact_strings` turns DuckDB's DICT_FSST string compression back on for every table (it is
    always on for `query_metrics`): smaller files, for a nightly run several times slower to write
    (`warehouse.connection.prepare`).

    Without `store_retrieved_ids` each trace is stored with an empty `retrieved_ids` (its
    `n_retrieved`, labels and their ranks as usual): nothing downstream reads the lists, and
    storing them is a large share of a day's ingestion (bench/README.md)."""

    compact_strings: bool = False
    store_retrieved_ids: bool = True

    def _ensure_folder(self) -> None:
        if self.database != ":memory:":
            Path(self.database).expanduser().parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def get_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        self._ensure_folder()
        # DuckDB's threads and memory limit from the budget unless the resource sets them
        config = {**duckdb_config(), **self.connection_config}
        try:
            conn = _retrying_lock(lambda: connect(self.database, config, self.compact_strings))
        except UnreadableDatabaseError as exc:
            raise dg.Failure(description=str(exc)) from exc
        try:
            yield conn
        finally:
            conn.close()

    def folder(self) -> Path:
        return Path(self.database).expanduser().absolute().parent

    def rows_folder(self) -> str:
        """The folder beside the file where the days' traces (and a sharded day's rows) are."""
        database = Path(self.database).expanduser().absolute()
        return str(database.with_name(database.name + FOLDER_SUFFIX))


def _retrying_lock(
    connect: Callable[[], duckdb.DuckDBPyConnection],
) -> duckdb.DuckDBPyConnection:
    """`connect()`, retried while another process holds the file's lock, as DuckDBResource does:
    10 retries, waiting 0.1 s and doubling (about 100 s in all)."""
    for wait in (0.1 * 2**attempt for attempt in range(10)):
        try:
            return connect()
        except (RuntimeError, duckdb.IOException):
            time.sleep(wait)
    return connect()


class PipelineSettingsResource(dg.ConfigurableResource):
    """The TOML configuration's path (None: built-in defaults) and where files are written.

    Reports default to `<warehouse folder>/reports`, approval records to
    `<warehouse folder>/approvals`."""

    config_path: str | None = None
    reports_dir: str | None = None
    approvals_dir: str | None = None

    def load(self) -> PipelineConfig:
        return load_config(self.config_path) if self.config_path else PipelineConfig()

    def reports_folder(self, warehouse: WarehouseResource) -> Path:
        folder = Path(self.reports_dir) if self.reports_dir else warehouse.folder() / "reports"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def approvals_folder(self, warehouse: WarehouseResource) -> Path:
        folder = (
            Path(self.approvals_dir) if self.approvals_dir else warehouse.folder() / "approvals"
        )
        folder.mkdir(parents=True, exist_ok=True)
        return folder
