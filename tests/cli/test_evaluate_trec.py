"""`evaluate --judgments`, `--trec-run` and `--output-format trec`.

trec_eval's own test files (tests/data/trec_eval/, with NIST's notice) are the oracle for the
TREC output; judgments kept apart are held to the same traces with the labels inline.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from retrieval_pipeline.cli import main

TREC_EVAL = Path(__file__).resolve().parents[1] / "data" / "trec_eval"
ISSUE_MEASURES = ("ndcg_cut_10", "P_5", "recall_20", "map", "recip_rank", "success_5")


def evaluate(*args: str) -> str:
    result = CliRunner().invoke(main, ["evaluate", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_trec_run_and_qrels_print_trec_evals_expected_output() -> None:
    out = evaluate(
        "--trec-run", str(TREC_EVAL / "results.test"),
        "--judgments", str(TREC_EVAL / "qrels.test"),
        "--output-format", "trec",
        "--metrics", "ndcg@10,P@5,recall@20,map,mrr,success@5",
    )  # fmt: skip
    lines = out.splitlines()
    expected = (TREC_EVAL / "out.test.aq").read_text().splitlines()
    wanted = {*ISSUE_MEASURES, "runid", "num_q"}
    # trec_eval's lines for these measures, per query and for all, in its order, character for
    # character (values to its 4 printed decimals)
    assert lines == [line for line in expected if line.split("\t")[0].rstrip() in wanted]
    assert len(lines) == 3 * 6 + 2 + 6
    assert "ndcg_cut_10           \tall\t0.3016" in lines


def test_trec_output_refuses_a_measure_trec_eval_lacks() -> None:
    result = CliRunner().invoke(
        main,
        ["evaluate", "--trec-run", str(TREC_EVAL / "results.test"), "--judgments",
         str(TREC_EVAL / "qrels.test"), "--output-format", "trec", "--gain", "exponential"],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "with exponential gain has no trec_eval name" in result.output
    both = CliRunner().invoke(main, ["evaluate", "x.jsonl", "--trec-run", "run.txt"])
    assert both.exit_code == 2 and "one of the two" in both.output


def _traces_and_judgments(rng: random.Random) -> tuple[list[dict], list[tuple[str, str, int]]]:
    """40 traces of 8 queries (lists of 20 of 30 documents) and graded judgments of 7 of those
    queries plus one with no trace; some grades negative (judged non-relevant in qrels)."""
    docs = [f"d{i:02d}" for i in range(30)]
    judgments = [
        (f"q{q}", doc, rng.choice([-1, 0, 0, 1, 2, 3]))
        for q in (*range(7), 99)
        for doc in rng.sample(docs, rng.randrange(1, 12))
    ]
    traces = [
        {
            "trace_id": f"t{i:02d}",
            "query_id": f"q{i % 8}",  # q7 is not judged
            "timestamp": f"2026-11-30T{i % 24:02d}:00:00Z",
            "retrieved_ids": rng.sample(docs, 20),
        }
        for i in range(40)
    ]
    return traces, judgments


def test_judgments_score_like_the_same_labels_inline(tmp_path: Path) -> None:
    traces, judgments = _traces_and_judgments(random.Random(23))
    qrels = tmp_path / "labels.qrels"
    qrels.write_text(
        "".join(f"{q} 0 {doc} {grade}\n" for q, doc, grade in judgments)
        + "q1 0 broken\nq2 0 d01 high\n"  # two bad lines, quarantined
    )
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps(t) + "\n" for t in traces))
    inline = tmp_path / "inline.jsonl"
    grades: dict[str, dict[str, float]] = {}
    for q, doc, grade in judgments:
        grades.setdefault(q, {})[doc] = max(grade, 0)
    inline.write_text(
        "".join(
            json.dumps({**t, "relevance_scores": grades[t["query_id"]]} if t["query_id"] in grades
                       else t) + "\n"
            for t in traces
        )
    )  # fmt: skip
    # a corpus that deleted two judged documents before the day: stale either way
    corpus = tmp_path / "corpus.parquet"
    deleted = {"d03", "d17"}
    pq.write_table(
        pa.table(
            {
                "doc_id": [f"d{i:02d}" for i in range(30)],
                "added_at": pa.nulls(30, pa.timestamp("us", tz="UTC")),
                "deleted_at": pa.array(
                    [1_700_000_000_000_000 if f"d{i:02d}" in deleted else None for i in range(30)],
                    pa.timestamp("us", tz="UTC"),
                ),
            }
        ),
        corpus,
    )
    runs = {}
    for name, args in {
        "judged": [str(bare), "--judgments", str(qrels)],
        "inline": [str(inline)],
    }.items():
        out = tmp_path / f"{name}.parquet"
        quarantine = tmp_path / f"{name}.quarantine.csv"
        summary = json.loads(
            evaluate(
                *args,
                "--corpus",
                str(corpus),
                "--format",
                "json",
                "--output",
                str(out),
                "--quarantine",
                str(quarantine),
            )
        )
        runs[name] = (summary, pd.read_parquet(out), quarantine)
    (judged, judged_rows, judged_quarantine), (inline_summary, inline_rows, _) = (
        runs["judged"],
        runs["inline"],
    )
    metrics = list(judged["means"])
    pd.testing.assert_frame_equal(judged_rows[["trace_id", *metrics]],
                                  inline_rows[["trace_id", *metrics]])  # fmt: skip
    assert judged["means"] == inline_summary["means"]
    assert judged["stale_labels_dropped"] == inline_summary["stale_labels_dropped"] > 0
    # labelled each way: 35 traces of judged queries by the judgments, 5 of q7 unannotated
    assert (judged["traces_labelled_by_judgments"], judged["traces_labelled_by_own_labels"]) == (
        35,
        0,
    )
    assert (inline_summary["traces_labelled_by_judgments"], inline_summary["traces_annotated"]) == (
        0,
        35,
    )
    assert judged["traces_unannotated"] == 5
    assert (judged["judged_queries"], judged["judged_queries_without_trace"]) == (8, 1)  # q99
    assert (judged["judgment_lines_read"], judged["judgment_lines_quarantined"]) == (
        len(judgments) + 2,
        2,
    )
    rows = pd.read_csv(judged_quarantine)
    assert list(zip(rows["source_line"], rows["reason"], strict=True)) == [
        (len(judgments) + 1, "has 3 fields; a qrels line is `qid iter docno rel` (4 fields)"),
        (len(judgments) + 2, 'grade is not a number (got "high")'),
    ]
    assert set(rows["source_file"]) == {str(qrels)}


def test_a_trace_with_its_own_labels_is_scored_on_those_alone(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(
        json.dumps({"trace_id": "own", "query_id": "q", "timestamp": "2026-11-30T00:00:00Z",
                    "retrieved_ids": ["a", "b"], "relevant_ids": ["b"]}) + "\n"
        + json.dumps({"trace_id": "none", "query_id": "q", "timestamp": "2026-11-30T00:00:00Z",
                      "retrieved_ids": ["a", "b"], "relevant_ids": []}) + "\n"
        + json.dumps({"trace_id": "bare", "query_id": "q", "timestamp": "2026-11-30T00:00:00Z",
                      "retrieved_ids": ["a", "b"]}) + "\n"
    )  # fmt: skip
    judgments = tmp_path / "j.csv"
    judgments.write_text("query_id,doc_id,grade\nq,a,1\n")
    out = tmp_path / "rows.csv"
    evaluate(str(traces), "--judgments", str(judgments), "--metrics", "mrr", "--output", str(out))
    mrr = dict(zip(*pd.read_csv(out)[["trace_id", "mrr"]].T.values, strict=True))
    # own: b relevant at rank 2; none: judged, nothing relevant; bare: the judgment, a at rank 1
    assert mrr == {"own": 1 / 2, "none": 0.0, "bare": 1.0}


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_the_summary_says_how_traces_were_labelled(fmt: str) -> None:
    out = evaluate(
        "--trec-run", str(TREC_EVAL / "results.test"), "--judgments", str(TREC_EVAL / "qrels.test"),
        "--format", fmt,
    )  # fmt: skip
    if fmt == "json":
        summary = json.loads(out)
        assert (summary["run_lines_read"], summary["run_queries"], summary["run_id"]) == (
            1500, 3, "STANDARD")  # fmt: skip
        assert summary["traces_labelled_by_judgments"] == 3
    else:
        assert "Labelled by their own labels: 0 traces; by the judgments: 3;" in out
        assert "1500 lines read, 1500 ranked documents of 3 queries" in out


def test_bad_run_lines_reach_the_quarantine_file_and_dropped_queries_are_named(
    tmp_path: Path,
) -> None:
    """Issue 32: `--quarantine` was 0 bytes for a TREC run with bad lines, and a query whose
    lines were all bad dropped out of `--output-format trec` without a word."""
    run = tmp_path / "run.txt"
    run.write_text(
        "q1 Q0 d1 1 2.0 tag\n"  # 1
        "q1 Q0 d2 2 abc tag\n"  # 2: score not a number
        "q7 Q0 d1 1 nan tag\n"  # 3: q7's only lines are bad
        "q7 Q0 d2\n"  # 4: three fields
        "q9 Q0 d1 1 inf tag\n"  # 5: q9 too
        "q1 Q0 d1 3 1.0 tag\n"  # 6: d1 already ranked for q1
    )
    qrels = tmp_path / "set.qrels"
    qrels.write_text("q1 0 d1 1\nq7 0 d1 1\nq9 0 d1 1\n")
    quarantine = tmp_path / "bad.jsonl"
    args = ["evaluate", "--trec-run", str(run), "--judgments", str(qrels), "--metrics", "map"]
    result = CliRunner().invoke(
        main, [*args, "--output-format", "trec", "--quarantine", str(quarantine)]
    )
    assert result.exit_code == 0, result.output
    # q1 alone is scored: AP 1 (its one relevant document first)
    assert result.stdout.splitlines() == [
        "map                   \tq1\t1.0000",
        "runid                 \tall\ttag",
        "num_q                 \tall\t1",
        "map                   \tall\t1.0000",
    ]
    assert result.stderr.splitlines() == [
        "2 queries had no valid run line and are not scored: q7, q9"
    ]
    rows = [json.loads(line) for line in quarantine.read_text().splitlines()]
    fields = "a run line is `qid Q0 docno rank score tag` (6 fields)"
    assert [(r["source_file"], r["source_line"], r["trace_id"], r["reason"]) for r in rows] == [
        (str(run), 2, None, "score is not a number (got 'abc')"),
        (str(run), 3, None, "score is not finite (got 'nan')"),
        (str(run), 4, None, f"has 3 fields; {fields}"),
        (str(run), 5, None, "score is not finite (got 'inf')"),
        (str(run), 6, None, "document d1 is already ranked for query q1 (line 1)"),
    ]
    summary = json.loads(CliRunner().invoke(main, [*args, "--format", "json"]).stdout)
    assert summary["run_lines_quarantined"] == 5
    assert summary["run_queries_without_valid_line"] == ["q7", "q9"]
