"""Reports for eyes and for programs: HTML primitives (`html`), SVG charts (`svg`, `charts`,
`trend_chart`), the nightly regression report (`regression`, `regression_html`) and the A/B
comparison report (`comparison`, `comparison_charts`).

Pure: tables and results in, text and files out; no DuckDB, no Dagster. Every string that comes
from trace data is escaped (`html.escape` in HTML and chart text, `text.escape_markdown` in
Markdown; in charts also stripped of control characters and shortened), and every file is
written whole (`files.write_atomically`).
"""
