"""Reports: HTML primitives, SVG charts, the regression report and the comparison report (HTML,
Markdown, JSON), per-query output files. Pure: neither DuckDB nor Dagster."""
