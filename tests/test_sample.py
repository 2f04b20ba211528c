"""The bundled sample store: deterministic, realistic, and with exactly one injected regression.

Metric values come from the engine (`run_evaluation`, the `evaluate` command's code) on the
written files, grouped with pandas; the limits are the default configuration's.
"""

from __future__ import annotations

import gzip
import json
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest

from retrieval_pipeline.config import PipelineConfig
from retrieval_pipeline.sample import (
    MALFORMED_PER_DAY,
    MANIFEST_NAME,
    REGRESSION_METRIC,
    REGRESSION_SEGMENT,
    REGRESSION_VARIANT,
    write_sample_store,
)
from retrieval_pipeline.store import LocalTraceStore
from retrieval_pipeline.warehouse import connection, ingestion, steps
from retrieval_pipeline.warehouse import corpus as wcorpus
from retrieval_pipeline.warehouse.evaluation import EvaluationRun, run_evaluation

END = date(2026, 11, 30)  # the `sample_store` fixture's last day (tests/conftest.py)
DAYS = 3  # and its number of days
CONFIG = PipelineConfig()


@pytest.fixture(scope="module")
def runs(sample_store: Path) -> dict[date, EvaluationRun]:
    store = LocalTraceStore(sample_store)
    corpus = store.corpus_file()
    return {
        day: run_evaluation(store.trace_files(day), CONFIG.metrics, corpus=corpus)
        for day in store.days()
    }


def means(run: EvaluationRun) -> pd.DataFrame:
    return run.per_query.groupby(["segment", "variant"])[list(CONFIG.metrics)].mean()


def read_records(path: Path) -> list[dict[str, object]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    out = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def test_layout(sample_store: Path) -> None:
    store = LocalTraceStore(sample_store)
    assert store.days() == [END - timedelta(days=n) for n in range(DAYS - 1, -1, -1)]
    for day in store.days():
        names = sorted(f.name for f in store.trace_files(day))
        assert names == ["candidate.jsonl.gz", "control.jsonl"]
    corpus = store.corpus_file()
    assert corpus is not None and corpus.name.endswith(".parquet")


def test_manifest_describes_the_regression(sample_store: Path) -> None:
    manifest = json.loads((sample_store / MANIFEST_NAME).read_text())
    assert manifest["injected_regression"] | {"how": None} == {
        "day": END.isoformat(),
        "segment": "multi_hop",
        "variant": "candidate",
        "metric": "ndcg@10",
        "how": None,
    }
    assert manifest["days"] == [d.isoformat() for d in LocalTraceStore(sample_store).days()]
    assert manifest["totals"]["malformed"] == DAYS * MALFORMED_PER_DAY


def test_summary_has_counts(tmp_path: Path) -> None:
    summary = write_sample_store(tmp_path / "s", days=1, seed=3, end_date=END)
    manifest = json.loads((tmp_path / "s" / MANIFEST_NAME).read_text())
    assert f"{manifest['totals']['traces']} traces" in summary
    assert f"{MALFORMED_PER_DAY} malformed records" in summary
    assert "multi_hop / candidate ndcg@10 on 2026-11-30" in summary


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    def snapshot(name: str, seed: int) -> dict[str, bytes]:
        root = tmp_path / name
        write_sample_store(root, days=2, seed=seed, end_date=END)
        return {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }

    first, again, other = snapshot("a", 11), snapshot("b", 11), snapshot("c", 12)
    assert first == again
    assert first.keys() == other.keys()
    assert (
        first["traces/date=2026-11-30/control.jsonl"]
        != other["traces/date=2026-11-30/control.jsonl"]
    )


def test_end_date_defaults_to_yesterday_utc(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    write_sample_store(tmp_path / "s", days=1, seed=1)
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    assert LocalTraceStore(tmp_path / "s").days() == [yesterday]


def test_refuses_a_foreign_non_empty_folder_and_replaces_its_own(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        write_sample_store(tmp_path, days=1, seed=1, end_date=END)
    target = tmp_path / "store"
    write_sample_store(target, days=2, seed=1, end_date=END)
    write_sample_store(target, days=1, seed=1, end_date=END - timedelta(days=5))
    assert LocalTraceStore(target).days() == [END - timedelta(days=5)]


def test_five_segments_two_variants_overlapping_queries(sample_store: Path) -> None:
    day_dir = sample_store / "traces" / f"date={END.isoformat()}"
    records = read_records(day_dir / "control.jsonl") + read_records(day_dir / "candidate.jsonl.gz")
    valid = [r for r in records if "trace_id" in r and "segment" in r]
    assert {r["segment"] for r in valid} == {
        "factual",
        "multi_hop",
        "navigational",
        "long_tail",
        "code",
    }
    queries = {
        variant: {r["query_id"] for r in valid if r["variant"] == variant}
        for variant in ("control", "candidate")
    }
    shared = queries["control"] & queries["candidate"]
    assert shared and shared != queries["control"] and shared != queries["candidate"]
    per_variant = pd.Series([r["variant"] for r in valid]).value_counts()
    assert (per_variant >= 200).all() and (per_variant <= 800).all()


def test_ids_mix_integers_and_strings(sample_store: Path) -> None:
    records = read_records(sample_store / "traces" / f"date={END.isoformat()}" / "control.jsonl")
    lists = [r.get("retrieved_ids") for r in records]
    ids = [i for listed in lists if isinstance(listed, list) for i in listed]
    assert any(isinstance(i, int) for i in ids) and any(isinstance(i, str) for i in ids)


def test_malformed_records_are_quarantined_with_their_reasons(
    runs: dict[date, EvaluationRun],
) -> None:
    for run in runs.values():
        assert run.ingest.quarantined == MALFORMED_PER_DAY
        assert set(run.quarantine["field"].dropna()) >= {"trace_id", "retrieved_ids"}
        reasons = " | ".join(run.quarantine["reason"])
        assert "malformed JSON" in reasons
        assert "must be a finite number >= 0 (got -1)" in reasons


def test_coverage_differs_by_segment_and_clears_the_minimum(
    runs: dict[date, EvaluationRun],
) -> None:
    for run in runs.values():
        scored = run.per_query["ndcg@10"].notna()
        coverage = scored.groupby(run.per_query["segment"]).mean()
        assert coverage.min() >= CONFIG.checks.min_coverage + 0.1
        assert coverage.max() - coverage.min() >= 0.2
        annotated = scored.groupby([run.per_query["segment"], run.per_query["variant"]]).sum()
        assert annotated.min() >= CONFIG.checks.min_annotated_traces


def test_corpus_deletions_make_some_labels_stale(sample_store: Path) -> None:
    store = LocalTraceStore(sample_store)
    conn = connection.connect()
    for day in store.days():
        ingestion.ingest_traces(conn, store.trace_files(day), partition_date=day)
    wcorpus.load_corpus(conn, store.corpus_file())
    counts = steps.build_labels(conn, store.days()[0], END, use_corpus=True)
    assert 0 < counts.stale < CONFIG.checks.max_stale_label_rate * counts.labels
    reasons = conn.execute(
        "select distinct stale_reason from labels where stale_reason is not null"
    ).fetchall()
    assert ("deleted before the query was served",) in reasons


def test_clean_data_passes_every_default_threshold_with_margin(
    runs: dict[date, EvaluationRun],
) -> None:
    for day, run in runs.items():
        table = means(run)
        for (segment, variant), row in table.iterrows():
            if (day, segment, variant) == (END, REGRESSION_SEGMENT, REGRESSION_VARIANT):
                continue
            for metric, threshold in CONFIG.thresholds.items():
                assert row[metric] >= threshold + 0.05, (day, segment, variant, metric)


def test_the_injected_regression_fails_clearly_and_alone(runs: dict[date, EvaluationRun]) -> None:
    row = means(runs[END]).loc[(REGRESSION_SEGMENT, REGRESSION_VARIANT)]
    assert row[REGRESSION_METRIC] < CONFIG.thresholds[REGRESSION_METRIC] - 0.1
    for metric, threshold in CONFIG.thresholds.items():
        if metric != REGRESSION_METRIC:
            assert row[metric] >= threshold + 0.05, metric


def test_regression_keeps_the_top_20_and_only_reorders(tmp_path: Path) -> None:
    # The same seed with the regression on another day: the regressed day's traces hold the
    # same documents in their lists, so recall@20 is unchanged and nDCG@10 drops.
    clean_root, bad_root = tmp_path / "clean", tmp_path / "bad"
    write_sample_store(clean_root, 2, 5, END, regression_day=END - timedelta(days=1))
    write_sample_store(bad_root, 2, 5, END)
    clean_store, bad_store = LocalTraceStore(clean_root), LocalTraceStore(bad_root)
    clean = run_evaluation(
        clean_store.trace_files(END), CONFIG.metrics, corpus=clean_store.corpus_file()
    ).per_query.set_index("trace_id")
    bad = run_evaluation(
        bad_store.trace_files(END), CONFIG.metrics, corpus=bad_store.corpus_file()
    ).per_query.set_index("trace_id")
    hit = (bad["segment"] == REGRESSION_SEGMENT) & (bad["variant"] == REGRESSION_VARIANT)
    untouched = bad.loc[~hit, list(CONFIG.metrics)]
    pd.testing.assert_frame_equal(untouched, clean.loc[~hit, list(CONFIG.metrics)])
    pd.testing.assert_series_equal(bad.loc[hit, "recall@20"], clean.loc[hit, "recall@20"])
    assert bad.loc[hit, "ndcg@10"].mean() < clean.loc[hit, "ndcg@10"].mean() - 0.2
