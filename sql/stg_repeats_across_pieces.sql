-- Parallel validation (docs/scaling.md): the records of a piece validated on its own whose
-- trace_id an earlier piece holds valid, with the reason one validating thread gives them.
--
-- A piece validated alone ranks a repeated trace_id within the piece only (its
-- `seen_trace_ids` is empty). Taken back in order, each of its records that was valid, or that
-- repeated a trace_id of its own piece, is ranked here again against the valid records of the
-- pieces before, with sql/stg_trace_records.sql's rule: the first by file order, then line,
-- stays; every later one is quarantined naming it.
--
-- Input: `piece_trace_ids` (file_order, source_file, source_line, trace_id, reason: the piece's
-- rows as validated alone); `seen_trace_ids` (the valid records of the earlier pieces);
-- `raw_records` (the piece's raw text).
-- Output: one row per record whose field, reason and text change: file_order, source_line,
-- field, reason, raw_record. None in the common case, where no trace_id repeats across pieces.

with

ranked_alone as (
    select
        file_order,
        source_file,
        source_line,
        trace_id
    from piece_trace_ids
    where reason is null or is_duplicate_trace_id_reason(reason)
),

occurrences as (
    select
        trace_id,
        file_order,
        source_file,
        source_line,
        true as in_piece
    from ranked_alone
    where trace_id in (select seen.trace_id from seen_trace_ids as seen)
    union all
    select
        trace_id,
        file_order,
        source_file,
        source_line,
        false as in_piece
    from seen_trace_ids
    where trace_id in (select ranked_alone.trace_id from ranked_alone)
),

ranked as (
    select
        trace_id,
        file_order,
        source_line,
        in_piece,
        first_value(source_file) over by_trace as first_file,
        first_value(source_line) over by_trace as first_line,
        row_number() over by_trace as occurrence
    from occurrences
    window by_trace as (partition by trace_id order by file_order, source_line)
),

final as (
    select
        ranked.file_order,
        ranked.source_line,
        'trace_id' as field,
        duplicate_trace_id_reason(ranked.trace_id, ranked.first_file, ranked.first_line)
            as reason,
        rtrim(raw_records.raw_record, chr(10)) as raw_record
    from ranked
    inner join raw_records
        on
            ranked.file_order = raw_records.file_order
            and ranked.source_line = raw_records.source_line
    where ranked.in_piece and ranked.occurrence > 1
)

select * from final
