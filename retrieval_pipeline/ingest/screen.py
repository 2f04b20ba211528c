"""The repeated-id screen: each list of retrieved ids keeps the first occurrence of every id
(`keep_first_occurrences`), in numpy and pyarrow rather than in DuckDB."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_pipeline.pandas_deferred import numbers


def _item_keys(items: pa.Array) -> np.ndarray:
    """A 32-bit key per string of `items`, from its length and its last 8 bytes: equal strings
    get equal keys, and different ones rarely do."""
    offset_type = np.int64 if pa.types.is_large_string(items.type) else np.int32
    offsets = np.frombuffer(items.buffers()[1], dtype=offset_type)
    offsets = offsets[items.offset : items.offset + len(items) + 1].astype(np.int64)
    data_buffer = items.buffers()[2]
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    )
    ends, lengths = offsets[1:], np.diff(offsets)
    # the 8 bytes that end where each item ends (the few items ending within the buffer's first
    # 8 bytes read them from a copy with 8 zero bytes in front)
    keys = np.empty(len(ends), dtype=np.uint64)
    early = int(np.searchsorted(ends, 8))
    head = np.concatenate((np.zeros(8, np.uint8), data[:8], np.zeros(8, np.uint8)))
    keys[:early] = _windows(head)[ends[:early]]
    if early < len(ends):
        keys[early:] = _windows(data)[ends[early:] - 8]
    # keep the item's own bytes only: the window's first 8 - length bytes belong to others
    short = np.flatnonzero(lengths < 8)
    keys[short] >>= (8 * (8 - np.maximum(lengths[short], 1))).astype(np.uint64)
    keys[lengths == 0] = 0
    keys ^= lengths.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)  # wraps, as meant
    keys *= np.uint64(0x9E3779B97F4A7C15)
    return (keys >> np.uint64(32)).astype(np.uint32)


def _windows(data: np.ndarray) -> np.ndarray:
    """Every 8-byte window of `data` as a little-endian integer (a view, no copy)."""
    return np.ndarray((max(len(data) - 7, 0),), dtype="<u8", buffer=data, strides=(1,))


# Lists of the same length are screened together, a row per list; lengths beyond this many of the
# commonest are screened in one sort keyed by row.
_SCREENED_LENGTHS = 8

# Rows screened at once: their keys and temporaries (a few MB at 100 ids a list) stay in the CPU's
# cache and in memory the allocator reuses. A whole 64 MiB piece at once was slower, the kernel
# handing out fresh pages for each temporary (bench/README.md).
_SCREENED_ROWS = 8_192


def _lists_that_may_repeat(ids: pa.ChunkedArray) -> np.ndarray:
    """Rows whose list may hold an id twice: two of its items with the same key (`_item_keys`).
    Every real repeat is among them; a false alarm only costs an exact look."""
    found = [
        start + _screen(ids.slice(start, _SCREENED_ROWS))
        for start in range(0, len(ids), _SCREENED_ROWS)
    ]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _screen(ids: pa.ChunkedArray) -> np.ndarray:
    """`_lists_that_may_repeat` of a few thousand rows.

    Lists that share a length are sorted as the rows of one 2D array (production lists mostly
    share the top-k's length), which costs far less than one sort of every item keyed by row."""
    lengths = _list_lengths(ids)
    if not lengths.sum():
        return np.zeros(0, dtype=np.int64)
    keys = np.concatenate([_item_keys(chunk.flatten()) for chunk in ids.chunks])
    firsts = np.cumsum(lengths) - lengths
    values, counts = np.unique(lengths[lengths > 1], return_counts=True)
    common = values[np.argsort(-counts, kind="stable")[:_SCREENED_LENGTHS]]
    found = []
    for length in common:
        rows = np.flatnonzero(lengths == length)
        if len(rows) * length == len(keys):  # every item is in these rows: a view, not a copy
            block = keys.reshape(len(rows), length)
        else:
            block = keys[firsts[rows, None] + np.arange(length)]
        block.sort(axis=1)
        found.append(rows[(block[:, 1:] == block[:, :-1]).any(axis=1)])
    rest = np.flatnonzero((lengths > 1) & ~np.isin(lengths, common))
    if len(rest):
        counts = lengths[rest]
        # the items of those rows: each row's first item, then consecutive ones
        items_of_rest = np.arange(counts.sum()) + np.repeat(
            firsts[rest] - (np.cumsum(counts) - counts), counts
        )
        keyed = (np.repeat(rest.astype(np.uint64), counts) << np.uint64(32)) | keys[items_of_rest]
        keyed.sort()
        equal = keyed[1:][keyed[1:] == keyed[:-1]]
        found.append((equal >> np.uint64(32)).astype(np.int64))
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def keep_first_occurrences(staged: pa.Table, keep_retrieved_ids: bool = True) -> pa.Table:
    """`staged` (rows of sql/stg_trace_records.sql) with each list's repeated retrieved ids
    dropped after their first occurrence, `n_duplicate_ids` counting them, `n_retrieved` the
    length left, and each label's rank closed up to its document's place in the shorter list.
    Without `keep_retrieved_ids` every list is left empty instead (a null one stays null), all
    else the same: the shortened lists are not built (for `warehouse.ingestion.ingest_traces`).

    Done here, vectorized, because DuckDB's per-list distinct or sort costs as much as the rest
    of the validation (bench/README.md, "Where the time goes"): the few lists that may repeat an
    id are found at once, then walked exactly."""
    # the lists stay in the pieces they were read in: combining them would copy every id, and the
    # insert copies them into whole batches anyway (warehouse.ingestion._in_batches_per_thread)
    ids = staged.column("retrieved_ids")
    lengths = _list_lengths(ids)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    keep = np.ones(int(offsets[-1]), dtype=bool)
    dropped = np.zeros(staged.num_rows, dtype=np.int32)
    for row in _lists_that_may_repeat(ids):
        start = int(offsets[row])
        seen: set[object] = set()
        for position, doc_id in enumerate(ids[int(row)].as_py()):
            if doc_id in seen:
                keep[start + position] = False
            seen.add(doc_id)
        dropped[row] = lengths[row] - int(keep[start : offsets[row + 1]].sum())
    if dropped.any():
        labels = _close_up_ranks(
            staged.column("labels").combine_chunks(), np.flatnonzero(dropped), offsets, keep
        )
        staged = staged.set_column(staged.column_names.index("labels"), "labels", labels)
    n_retrieved = pc.subtract(pc.list_value_length(ids).cast(pa.int32()), pa.array(dropped))
    if not keep_retrieved_ids:
        ids = pa.ListArray.from_arrays(
            pa.array(np.zeros(len(ids) + 1, dtype=np.int32)),
            pa.array([], ids.type.value_type),
            mask=ids.is_null().combine_chunks(),
        )
    elif dropped.any():
        ids = _without_items(ids, offsets, dropped, keep)
    staged = staged.set_column(staged.column_names.index("retrieved_ids"), "retrieved_ids", ids)
    return staged.append_column("n_duplicate_ids", pa.array(dropped)).append_column(
        "n_retrieved", n_retrieved
    )


def _list_lengths(lists: pa.ChunkedArray) -> np.ndarray:
    """Each list's length, 0 for a null one."""
    return numbers(pc.list_value_length(lists)).astype(np.int64)


def _without_items(
    lists: pa.ChunkedArray, offsets: np.ndarray, dropped: np.ndarray, keep: np.ndarray
) -> pa.ListArray:
    """`lists` as one array, without the items `keep` marks False (by position among all items;
    `offsets` are each list's first, `dropped` how many each loses). The runs of kept items
    between the dropped few are copied once, whole, rather than item by item."""
    gone = np.flatnonzero(~keep)
    starts = np.concatenate(([0], gone + 1))
    ends = np.concatenate((gone, [len(keep)]))
    items = pc.list_flatten(lists)
    runs = [
        chunk
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True)
        if end > start
        for chunk in items.slice(start, end - start).chunks
    ]
    dropped_before = np.concatenate(([0], np.cumsum(dropped, dtype=np.int64)))
    return pa.ListArray.from_arrays(
        pa.array((offsets - dropped_before).astype(np.int32)),
        pa.concat_arrays(runs) if runs else pa.array([], lists.type.value_type),
        mask=lists.is_null().combine_chunks(),
    )


def _close_up_ranks(
    labels: pa.ListArray, rows: np.ndarray, id_offsets: np.ndarray, keep: np.ndarray
) -> pa.ListArray:
    """`labels` with the ranks of `rows` counted among the ids kept (`keep`, by item): a rank r
    (the first occurrence, which is always kept) becomes the number of ids kept among the first
    r of its list."""
    items = labels.values
    fields = list(items.type)
    children = dict(zip([f.name for f in fields], items.flatten(), strict=True))
    ranks = numbers(children["rank"]).copy()
    label_offsets = numbers(labels.offsets)
    for row in rows:
        of_row = ranks[label_offsets[row] : label_offsets[row + 1]]  # a view: set in place
        retrieved = of_row > 0
        kept_so_far = np.cumsum(keep[id_offsets[row] : id_offsets[row + 1]])
        of_row[retrieved] = kept_so_far[of_row[retrieved] - 1]
    children["rank"] = pa.array(ranks, children["rank"].type, mask=ranks == 0)
    ranked = pa.StructArray.from_arrays([children[f.name] for f in fields], fields=fields)
    return pa.ListArray.from_arrays(labels.offsets, ranked, mask=labels.is_null())
