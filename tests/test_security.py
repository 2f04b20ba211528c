"""Trace data never acts as code: SQL gets values only as bound parameters, reports escape what
traces say, the trace store cannot be left through partition keys or file names, and nothing
listens on a port.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from retrieval_pipeline.defs.nightly import assets
from retrieval_pipeline.defs.resources import (
    TraceStoreResource,
    WarehouseResource,
)
from retrieval_pipeline.reports.regression import build_report
from retrieval_pipeline.store import LocalTraceStore, TraceStoreError
from retrieval_pipeline.text import escape_markdown
from retrieval_pipeline.warehouse import connection
from retrieval_pipeline.warehouse.evaluation import run_evaluation
from tests.dagster_runs import PIPELINE, RunFolder, listening_sockets, materialize

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "retrieval_pipeline"
INJECTION = "'); drop table traces; --"
SCRIPT = "<script>alert(1)</script>"
PIPE = "a|b"
DAY = date(2026, 11, 30)
WAREHOUSE_TABLES = [
    "traces",
    "quarantine",
    "corpus",
    "labels",
    "query_metrics",
    "segment_metrics",
    "regression_report",
]


def _trace(n: int, segment: str, variant: str, relevant: bool) -> dict[str, object]:
    return {
        "trace_id": f"{INJECTION}{n}" if n % 7 == 0 else f"t{n}",
        "query_id": INJECTION,
        "timestamp": f"{DAY}T10:00:00Z",
        "retrieved_ids": [INJECTION, "d1", "d2"],
        "relevance_scores": {INJECTION: 2, "d2": 1} if relevant else {"d9": 1},
        "segment": segment,
        "variant": variant,
        "label_source": INJECTION,
    }


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The pipeline over a store whose names are SQL, HTML and Markdown (the store, warehouse
    and reports folders too): 30 traces per segment, the `a|b` segment failing thresholds."""
    base = tmp_path_factory.mktemp("hostile") / INJECTION
    day_dir = base / "store" / "traces" / f"date={DAY}"
    day_dir.mkdir(parents=True)
    lines = []
    for n in range(90):
        segment = [INJECTION, SCRIPT, PIPE][n % 3]
        lines.append(json.dumps(_trace(n, segment, INJECTION, relevant=segment != PIPE)))
    lines.append('{"trace_id": "' + INJECTION.replace("'", "\\u0027") + '", "oops"')
    (day_dir / f"{INJECTION}.jsonl").write_text("\n".join(lines) + "\n")
    result = materialize(PIPELINE, RunFolder(base).resources(base / "store"), day=DAY)
    return {"base": base, "result": result, "file": day_dir / f"{INJECTION}.jsonl"}


def _query(base: Path, sql: str) -> list[tuple[object, ...]]:
    """`sql` on the warehouse as every step reads it (the day's traces are beside the file)."""
    with contextlib.closing(connection.connect(RunFolder(base).database)) as conn:
        return conn.execute(sql).fetchall()


def test_sql_in_names_is_stored_as_names(hostile_run: dict[str, object]) -> None:
    base = hostile_run["base"]
    assert isinstance(base, Path)
    tables = {row[0] for row in _query(base, "select table_name from information_schema.tables")}
    assert set(WAREHOUSE_TABLES) <= tables  # nothing dropped
    assert _query(base, "select count(*) from traces") == [(90,)]
    segments = {row[0] for row in _query(base, "select distinct segment from traces")}
    assert segments == {INJECTION, SCRIPT, PIPE}
    assert _query(base, "select distinct variant, query_id, label_source from traces") == [
        (INJECTION, INJECTION, INJECTION)
    ]
    assert _query(base, "select count(*) from traces where trace_id like '%drop table%'") == [(13,)]
    assert _query(base, "select distinct source_file from traces") == [(str(hostile_run["file"]),)]
    ((reason, raw),) = _query(base, "select reason, raw_record from quarantine")
    assert reason == "malformed JSON" and "oops" in str(raw)
    labels = {row[0] for row in _query(base, "select distinct doc_id from labels")}
    assert INJECTION in labels
    mrr = _query(base, "select min(value) from query_metrics where metric = 'mrr' and value > 0")
    assert mrr == [(1.0,)]  # the injected id is a document like any other, at rank 1


def test_the_pipeline_reports_hostile_names_in_words(hostile_run: dict[str, object]) -> None:
    result = hostile_run["result"]
    assert isinstance(result, dg.ExecuteInProcessResult)
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    thresholds = evaluations["segment_thresholds"]
    assert not thresholds.passed  # the a|b segment has no relevant document
    # descriptions are plain text, holding the names verbatim
    assert f"{PIPE} / {INJECTION}: ndcg@10 = 0.000, " in (thresholds.description or "")
    assert not result.asset_materializations_for_node("deploy_gate")


def test_markdown_report_escapes_trace_strings(hostile_run: dict[str, object]) -> None:
    base = hostile_run["base"]
    assert isinstance(base, Path)
    text = (base / "reports" / f"regression_report_{DAY}.md").read_text()
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "| a\\|b |" in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    unescaped_pipes = {len(re.findall(r"(?<!\\)\|", line)) for line in rows}
    assert unescaped_pipes == {12}, "a cell break leaked from a name"  # 11 columns
    assert f"- {escape_markdown(PIPE)} / {escape_markdown(INJECTION)}:" in text


def test_html_report_escapes_trace_strings(hostile_run: dict[str, object]) -> None:
    base = hostile_run["base"]
    assert isinstance(base, Path)
    page = (base / "reports" / f"regression_report_{DAY}.html").read_text()
    assert "<script" not in page  # the page runs no script, the hostile name included
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown as text


def test_json_report_holds_names_verbatim(hostile_run: dict[str, object]) -> None:
    base = hostile_run["base"]
    assert isinstance(base, Path)
    data = json.loads((base / "reports" / f"regression_report_{DAY}.json").read_text())
    assert {row["segment"] for row in data["rows"]} >= {INJECTION, SCRIPT, PIPE}
    assert PIPE in {m["segment"] for m in data["misses"]}
    assert {row["variant"] for row in data["rows"]} == {INJECTION}


def test_dagster_markdown_metadata_is_escaped(hostile_run: dict[str, object]) -> None:
    result = hostile_run["result"]
    assert isinstance(result, dg.ExecuteInProcessResult)
    markdown: list[str] = []
    for node in ("traces", "regression_report", "segment_metrics", "labels", "query_metrics"):
        for materialization in result.asset_materializations_for_node(node):
            markdown += [
                str(value.value)
                for value in materialization.metadata.values()
                if isinstance(value, dg.MarkdownMetadataValue)
            ]
    for evaluation in result.get_asset_check_evaluations():
        markdown += [
            str(value.value)
            for value in evaluation.metadata.values()
            if isinstance(value, dg.MarkdownMetadataValue)
        ]
    assert markdown, "no Markdown metadata was found"
    joined = "\n".join(markdown)
    assert escape_markdown(SCRIPT) in joined  # the names are there, escaped
    assert "<script>" not in joined
    assert re.search(r"(?<!\\)a\|b", joined) is None


# --- no SQL built from values -------------------------------------------------------------------

SQL_START = re.compile(
    r"^\s*(select|insert|delete|update|create|drop|alter|with|copy|attach|detach|pragma|set|"
    r"begin|commit|rollback|install|load|export|import|from|call|truncate)\b",
    re.IGNORECASE,
)
SQL_RUNNERS = {"execute", "executemany", "sql", "query", "from_query"}
# what a DuckDB connection is called here (an Executor's `execute` runs no SQL)
CONNECTION = re.compile(r"^(conn|connection|con|cursor|duckdb|db)$")

# The audited sites where SQL text is put together: a table name (an identifier, which cannot
# be a parameter) checked against a fixed list before use. Values never reach these texts.
AUDITED = {
    # both from `stored(conn, table)`, which starts with `if table not in PARTITIONED_TABLES: raise`
    ("partitions.py", "delete_partitions", "target"),
    ("partitions.py", "insert", "stored(conn, table)"),
    # a name of MERGED_TABLES (the loop's), a variable named after it, and that table's full name
    ("merged_days.py", "show_merged_rows", "table"),
    ("merged_days.py", "show_merged_rows", "variable"),
    ("merged_days.py", "show_merged_rows", "stored_table"),
    # the stored `traces` of the session's own database (`qualified`: its name, quoted)
    ("day_rows.py", "__init__", "qualified(conn, 'traces')"),
    ("nightly.py", "_replace", "table"),  # `load_sql(_STATEMENTS[table])` refuses other names
    ("nightly.py", "_read", "_checked(table)"),  # `_checked` refuses names not in _STATEMENTS
}


def _literal(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value
            for part in node.values
            if isinstance(part, ast.Constant) and isinstance(part.value, str)
        )
    return None


def _is_static(node: ast.expr, static_names: set[str]) -> bool:
    """A string constant, `load_sql(...)` (a statement file), a name bound to one, or `+` of
    those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "load_sql"
    if isinstance(node, ast.Name):
        return node.id in static_names
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_static(node.left, static_names) and _is_static(node.right, static_names)
    return False


class _SqlAudit(ast.NodeVisitor):
    """Every place a module builds SQL text from parts, and every SQL call whose text is not
    static; `sites` holds (function, source of the pasted expression)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.function = "<module>"
        self.static_names: set[str] = set()
        self.sites: list[tuple[str, str]] = []
        self.dynamic_calls: list[tuple[str, str]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, outer_names = self.function, self.static_names
        self.function, self.static_names = node.name, set()
        for statement in ast.walk(node):
            if (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
                and _is_static(statement.value, set())
            ):
                self.static_names.add(statement.targets[0].id)
        self.generic_visit(node)
        self.function, self.static_names = outer, outer_names

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _pasted(self, node: ast.expr, parts: list[ast.expr]) -> None:
        for part in parts:
            if not _is_static(part, self.static_names):
                segment = ast.get_source_segment(self.source, part) or ast.dump(part)
                self.sites.append((self.function, segment))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if SQL_START.match(_literal(node) or ""):
            self._pasted(node, [v.value for v in node.values if isinstance(v, ast.FormattedValue)])
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        left = _literal(node.left) if isinstance(node.left, ast.Constant | ast.JoinedStr) else None
        if isinstance(node.op, ast.Mod) and left is not None and SQL_START.match(left):
            right = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            self._pasted(node, list(right))
        # "text " + part; an f-string's own parts are reported by visit_JoinedStr
        if isinstance(node.op, ast.Add) and left is not None and SQL_START.match(left):
            self._pasted(node, [node.right])
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr == "format" and SQL_START.match(_literal(func.value) or ""):
                self._pasted(node, [*node.args, *(k.value for k in node.keywords)])
            receiver = func.value.id if isinstance(func.value, ast.Name) else ""
            if func.attr in SQL_RUNNERS and CONNECTION.match(receiver) and node.args:
                text = node.args[0]
                built = isinstance(text, ast.JoinedStr | ast.BinOp)
                if not built and not _is_static(text, self.static_names):
                    segment = ast.get_source_segment(self.source, text) or ast.dump(text)
                    self.dynamic_calls.append((self.function, segment))
        self.generic_visit(node)


def audit(source: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    visitor = _SqlAudit(source)
    visitor.visit(ast.parse(source))
    return visitor.sites, visitor.dynamic_calls


def test_no_sql_is_built_from_values() -> None:
    found: set[tuple[str, str, str]] = set()
    dynamic: list[tuple[str, str, str]] = []
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        sites, calls = audit(path.read_text(encoding="utf-8"))
        found |= {(path.name, function, expr) for function, expr in sites}
        dynamic += [(path.name, function, expr) for function, expr in calls]
    assert found == AUDITED, "SQL text built from something other than a checked table name"
    assert dynamic == [], "SQL run from a text that is neither a literal nor a statement file"
    partitions_source = (PACKAGE / "warehouse" / "partitions.py").read_text()
    assert "if table not in PARTITIONED_TABLES:\n        raise ValueError" in partitions_source


@pytest.mark.parametrize(
    "snippet",
    [
        "def f(conn, name):\n    conn.execute(f\"select * from t where segment = '{name}'\")\n",
        "def f(conn, name):\n    conn.execute(\"delete from t where v = '%s'\" % name)\n",
        'def f(conn, name):\n    conn.execute("select * from {}".format(name))\n',
        'def f(conn, name):\n    conn.execute("select * from t where v = " + name)\n',
        "def f(conn, text):\n    conn.sql(text)\n",
        'def f(conn, t):\n    sql = f"""\n    SELECT * FROM {t}"""\n    conn.execute(sql)\n',
    ],
)
def test_the_audit_catches_sql_built_from_values(snippet: str) -> None:
    sites, calls = audit(snippet)
    assert sites or calls


def test_the_audit_accepts_parameters_and_statement_files() -> None:
    source = (
        "def f(conn, day):\n"
        "    statement = load_sql('x')\n"
        "    conn.execute(statement, {'day': day})\n"
        "    conn.execute('select 1 where $a = 1', {'a': day})\n"
        "    conn.execute('create temp table t as ' + load_sql('y'))\n"
        "    message = f'{day} documents from {statement}'\n"
    )
    assert audit(source) == ([], [])


def test_sql_in_a_file_path_and_names_through_evaluate(tmp_path: Path) -> None:
    folder = tmp_path / INJECTION
    folder.mkdir()
    path = folder / f"{INJECTION}.jsonl"
    records = [_trace(n, INJECTION, INJECTION, relevant=True) for n in range(3)]
    path.write_text("\n".join(json.dumps(r) for r in [*records, records[0]]) + "\n")
    run = run_evaluation(folder, "mrr")
    assert run.per_query.segment.tolist() == [INJECTION] * 3
    (reason,) = run.quarantine.reason
    assert reason == f"duplicate trace_id {INJECTION}0 (first seen at {path} line 1)"


def test_sql_in_a_config_segment_override(tmp_path: Path) -> None:
    from retrieval_pipeline.config import load_config, thresholds_frame

    config_file = tmp_path / "config.toml"
    key = json.dumps(INJECTION)  # a TOML basic string
    config_file.write_text(f'[segment_thresholds.{key}]\n"mrr" = 0.5\n')
    frame = thresholds_frame(load_config(config_file))
    assert INJECTION in set(frame["segment"].dropna())  # a row of a registered table, no text


# --- the trace store cannot be left ------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> LocalTraceStore:
    day = tmp_path / "store" / "traces" / f"date={DAY}"
    day.mkdir(parents=True)
    (day / "inside.jsonl").write_text("{}\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.jsonl").write_text("{}\n")
    return LocalTraceStore(tmp_path / "store")


@pytest.mark.parametrize(
    "parts",
    [
        ("..", "outside"),
        ("traces", "..", "..", "outside"),
        ("/etc",),
        ("traces/../../outside",),
        ("",),
    ],
)
def test_paths_that_leave_the_root_are_refused(store: LocalTraceStore, parts: tuple[str]) -> None:
    with pytest.raises(TraceStoreError, match="refusing"):
        store.path(*parts)


def test_symlinks_out_of_the_store_are_refused(store: LocalTraceStore, tmp_path: Path) -> None:
    day = store.root / "traces" / f"date={DAY}"
    (day / "escape.jsonl").symlink_to(tmp_path / "outside" / "secret.jsonl")
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        store.trace_files(DAY)
    (day / "escape.jsonl").unlink()
    other = DAY + timedelta(days=1)
    (store.root / "traces" / f"date={other}").symlink_to(tmp_path / "outside")
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        store.trace_files(other)
    (store.root / "traces" / f"date={other}").unlink()
    (store.root / "corpus").symlink_to(tmp_path / "outside")
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        store.corpus_file()


def test_a_symlinked_traces_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere" / f"date={DAY}").mkdir(parents=True)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "traces").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TraceStoreError, match="outside the trace store root"):
        LocalTraceStore(tmp_path / "store").days()


def test_a_partition_key_cannot_name_a_path(tmp_path: Path) -> None:
    """Partition keys are dates to Dagster (anything else is refused before a run starts), and
    the store builds a day's folder from a `date`, never from the key's text."""
    with pytest.raises(dg.DagsterError, match="partition"):
        dg.materialize(
            [assets.traces],
            partition_key="../../etc",
            resources={
                "trace_store": TraceStoreResource(root=str(tmp_path)),
                "warehouse": WarehouseResource(database=str(tmp_path / "w.duckdb")),
            },
            instance=dg.DagsterInstance.ephemeral(),
        )
    with pytest.raises(AttributeError):
        LocalTraceStore(tmp_path).day_dir("../../etc")  # type: ignore[arg-type]


def test_an_escaping_store_fails_the_run_in_words(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "store" / "traces").mkdir(parents=True)
    (tmp_path / "store" / "traces" / f"date={DAY}").symlink_to(tmp_path / "outside")
    result = materialize([assets.traces], RunFolder(tmp_path).resources(tmp_path / "store"), DAY)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    error = failure.step_failure_data.error
    assert error is not None and "outside the trace store root" in error.message
    assert error.cls_name == "Failure"  # a refusal in words, not a crash


# --- nothing listens ---------------------------------------------------------------------------

# a server socket, or a library that makes one (socket.gethostname() opens nothing)
NETWORK = re.compile(
    r"socket\.socket\(|create_server\(|\.(bind|listen|serve_forever)\(|start_http_server|"
    r"run_simple|^\s*(import|from)\s+(socketserver|http\.server|aiohttp|uvicorn|flask|fastapi|"
    r"tornado|grpc|xmlrpc\.server|wsgiref|dagster_webserver)\b",
    re.MULTILINE,
)


# The one module that may listen: Prometheus' /metrics for `monitor --metrics-port` and the live
# sensor, only when asked, and on 127.0.0.1 unless told otherwise (docs/operations.md).
METRICS_SERVER = "retrieval_pipeline/live/prometheus.py"


def test_nothing_in_the_package_opens_a_port() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    offenders = [str(p.relative_to(ROOT)) for p in files if NETWORK.search(p.read_text())]
    assert offenders in ([], [METRICS_SERVER])
    assert 'DEFAULT_HOST = "127.0.0.1"' in (ROOT / METRICS_SERVER).read_text()


def test_a_run_opens_no_listening_socket(hostile_run: dict[str, object]) -> None:
    """The pipeline ran in this process: it holds no listening TCP or UDP socket afterwards."""
    if not Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net")
    assert listening_sockets() == set()


def test_readme_says_how_to_bind_the_ui_to_localhost() -> None:
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"dagster dev\b[^\n]*-h 127\.0\.0\.1", readme)
    dagster_yaml = (ROOT / "dagster_home" / "dagster.yaml").read_text()
    assert "0.0.0.0" not in dagster_yaml and "telemetry:\n  enabled: false" in dagster_yaml


def test_report_json_is_strict_json_whatever_the_names(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        [
            {
                "partition_date": DAY,
                "segment": '"\n\\u0000</script>',
                "variant": "\u2028",
                "metric": "mrr",
                "traces": 1,
                "annotated_traces": 1,
                "coverage": 1.0,
                "mean": float("nan"),
                "ci_low": None,
                "ci_high": None,
                "baseline": None,
                "baseline_days": 0,
                "delta": None,
                "threshold": 0.5,
                "status": "insufficient",
                "margin": None,
                "min_annotated": 20,
            }
        ]
    )
    from retrieval_pipeline.config import PipelineConfig

    built = build_report(frame, PipelineConfig(), DAY)
    data = json.loads(built.to_json())  # allow_nan=False: NaN became null, names are escaped
    assert data["rows"][0]["segment"] == '"\n\\u0000</script>'
    assert data["rows"][0]["mean"] is None
    assert len(built.markdown_table().split("\n")) == 3  # header, rule, one row


def test_every_test_the_guarantees_name_exists() -> None:
    """docs/guarantees.md cites tests as `file.py::name` (`::name` refers to the last file)."""
    guarantees = (ROOT / "docs" / "guarantees.md").read_text()
    section = guarantees[guarantees.index("## Guarantees") :]
    cited: list[tuple[str, str]] = []
    current = ""
    for file, name in re.findall(r"(?:(test_\w+\.py))?::(test_\w+)", section):
        current = file or current
        cited.append((current, name))
    assert len(cited) > 20
    for file, name in cited:
        found = list((ROOT / "tests").rglob(file))
        assert len(found) == 1, f"{file}: {len(found)} files of that name under tests/"
        source = found[0].read_text()
        assert f"def {name}(" in source, f"{file}::{name}"
