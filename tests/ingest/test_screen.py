"""The repeated-id screen (`ingest.screen.keep_first_occurrences`) against a walk of each list."""

from __future__ import annotations

from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_pipeline.ingest import screen

# Ids that end alike (false alarms for the 8-byte screen), short ones, multi-byte UTF-8.
_IDS = [
    "a",
    "b",
    "7",
    "",
    "doc-00000001",
    "xdoc-00000001",
    "doc-00000002",
    "é",
    "中文-1",
    "12345678",
]


LABEL_TYPE = pa.list_(
    pa.struct([("doc_id", pa.string()), ("grade", pa.float64()), ("rank", pa.int32())])
)


def staged_rows(lists: list[list[str] | None], labelled: list[str]) -> pa.Table:
    """Rows as sql/stg_trace_records.sql stages them: each list with labels on `labelled`,
    ranked where the statement ranks them, at their first position in the list as given."""
    labels = [
        [
            {"doc_id": doc, "grade": 1.0, "rank": ids.index(doc) + 1 if doc in ids else None}
            for doc in labelled
        ]
        for ids in (ids or [] for ids in lists)
    ]
    return pa.table(
        {
            "retrieved_ids": pa.array(lists, pa.list_(pa.string())),
            "labels": pa.array(labels, LABEL_TYPE),
            "x": range(len(lists)),
        }
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.lists(st.sampled_from(_IDS), max_size=12)), max_size=12),
    st.lists(st.sampled_from(_IDS), max_size=4, unique=True),
    st.integers(1, 13),
)
def test_keep_first_occurrences_drops_later_repeats_only(
    lists: list[list[str] | None], labelled: list[str], screened_rows: int
) -> None:
    staged = staged_rows(lists, labelled)
    half = len(lists) // 2  # in two chunks, the second sliced, as DuckDB may hand them over
    chunked = pa.concat_tables([staged.slice(0, half), staged.slice(half)])
    with mock.patch.object(screen, "_SCREENED_ROWS", screened_rows):
        out = screen.keep_first_occurrences(chunked)
        emptied = screen.keep_first_occurrences(chunked, keep_retrieved_ids=False)
    # without the lists kept: each one empty (a null one null), every other column the same
    assert emptied.column("retrieved_ids").to_pylist() == [
        None if ids is None else [] for ids in lists
    ]
    assert emptied.drop_columns("retrieved_ids").equals(out.drop_columns("retrieved_ids"))
    expected = [None if ids is None else list(dict.fromkeys(ids)) for ids in lists]
    assert out.column("retrieved_ids").to_pylist() == expected
    dropped = [0 if ids is None else len(ids) - len(set(ids)) for ids in lists]
    assert out.column("n_duplicate_ids").to_pylist() == dropped
    assert out.column("n_retrieved").to_pylist() == [
        None if e is None else len(e) for e in expected
    ]
    # a label's rank is its place in the list without repeats
    ranks = [[label["rank"] for label in row] for row in out.column("labels").to_pylist()]
    assert ranks == [
        [ids.index(doc) + 1 if doc in ids else None for doc in labelled]
        for ids in (ids or [] for ids in expected)
    ]
    assert out.column("x").to_pylist() == list(range(len(lists)))


@pytest.mark.parametrize("screened_rows", [screen._SCREENED_ROWS, 7])
def test_keep_first_occurrences_screens_lists_of_many_lengths(
    screened_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More distinct lengths than are screened as 2D blocks, so some rows go through the sort
    # keyed by row. Each length has a list without repeats and three that end in a repeat of
    # their first, a middle and their last-but-one item. Screened 7 rows at a time, the blocks
    # start in the middle of a length's rows.
    monkeypatch.setattr(screen, "_SCREENED_ROWS", screened_rows)
    lists: list[list[str] | None] = [None, []]
    for length in range(2, 40):
        unique = [f"doc-{length:02d}-{i:04d}" for i in range(length)]
        lists.append(unique)
        for at in (0, (length - 1) // 2, length - 2):
            lists.append([*unique[: length - 1], unique[at]])
    staged = staged_rows(lists, ["doc-39-0038", "doc-20-0010"])  # last of 39, middle of 20
    staged = staged.set_column(
        0, "retrieved_ids", staged.column(0).cast(pa.list_(pa.large_string()))
    )
    out = screen.keep_first_occurrences(staged.slice(1))
    expected = [None if ids is None else list(dict.fromkeys(ids)) for ids in lists[1:]]
    ranks = [[label["rank"] for label in row] for row in out.column("labels").to_pylist()]
    assert ranks[-4:] == [[39, None], [None, None], [None, None], [None, None]]
    assert ranks[-80:-76] == [[None, 11]] * 4  # length 20: the repeat comes after the label
    assert out.column("retrieved_ids").to_pylist() == expected
    dropped = [0 if ids is None else len(ids) - len(set(ids)) for ids in lists[1:]]
    assert out.column("n_duplicate_ids").to_pylist() == dropped
    assert sum(dropped) == 3 * 38  # lengths 2..39, three lists with one repeat each
