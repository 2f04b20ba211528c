"""Reading a day's files: file formats, pieces, the plain lane's types, the repeated-id screen and
the corpus snapshot. Pure: pyarrow and numpy, never DuckDB or Dagster (the statements that validate
a piece live in `warehouse`)."""
