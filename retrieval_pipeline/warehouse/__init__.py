"""The warehouse: every statement that touches DuckDB, and the one module that knows where
`sql/` is."""
