"""The warehouse: every DuckDB statement. Connection and migration, partition writes, the
validation lanes' statements, ingestion with its read-ahead and write-behind, corpus load, label
and metric steps, the nightly's aggregate reads, `evaluate`'s private run, and `sql.py`, the one
module that knows where `sql/` is."""
