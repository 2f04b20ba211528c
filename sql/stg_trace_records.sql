-- Validated trace records of one piece of an ingestion, shaped for `traces` and `quarantine`.
--
-- Input: `trace_fields`, one row per record with its typed fields and the reason it cannot be
-- scored (a view of sql/stg_trace_fields.sql, which reads any record, or of
-- sql/stg_plain_trace_fields.sql, which reads a piece of plain records faster); `raw_records`,
-- the piece's raw text; `seen_trace_ids` (trace_id, file_order, source_file, source_line), the
-- valid records of its earlier pieces. Parameter: $partition_date (the store's day, or null to
-- use the UTC date of each record's own timestamp).
-- Output: one row per record. `reason` is null for a valid record; a later record repeating a
-- valid record's trace_id is quarantined. Labels: relevance_scores' grades, then grade 1 for
-- relevant ids it does not grade, each with its rank in retrieved_ids; retrieved_ids is the list
-- as given: engine.keep_first_occurrences then drops a repeated id's later occurrences and counts
-- them in n_duplicate_ids (a distinct or sort per list in DuckDB would cost as much as the
-- validation).
-- `outside_partition_day` marks a valid record whose UTC date is not its partition's: with
-- $partition_date the store's day is authoritative, so the record is kept there and counted.

with

-- label_ids: graded ids then relevant ids, sorted by id, only when a record has both; a
-- relevant id right after its own grade is already a label (sorted, not a search per id, so that
-- long lists stay fast).
sorted_ids as (
    select
        *,
        case
            when len(score_keys) > 0 and len(relevant_ids) > 0
                then list_sort(
                    list_concat(
                        list_transform(
                            score_keys, lambda d: struct_pack(d := d, from_relevant := false)
                        ),
                        list_transform(
                            list_distinct(relevant_ids),
                            lambda d: struct_pack(d := d, from_relevant := true)
                        )
                    )
                )
        end as label_ids
    from trace_fields
),

-- materialized: read twice below, and recomputing the validation would double its cost
shaped as materialized (
    select
        source_file,
        file_order,
        source_line,
        -- the text is kept for a quarantined record only (a valid one is its typed columns)
        -- (without the newlines a row of a clean JSON-lines piece ends with: readers.RAW_SCHEMA)
        case when reason is not null then rtrim(raw_record, chr(10)) end as raw_record,
        field,
        reason,
        coalesce(
            $partition_date::date,
            (served_at at time zone 'UTC')::date
        ) as partition_date,
        trace_id,
        query_id,
        served_at,
        coalesce(segment, 'unknown') as segment,
        coalesce(variant, 'default') as variant,
        label_source,
        retrieved_ids,
        is_judged,
        -- relevance_scores gives grades; relevant_ids adds grade 1 for ids it does not grade. A
        -- label's rank is its document's first position in retrieved_ids (null: not retrieved);
        -- engine.keep_first_occurrences closes it up where earlier repeats are dropped.
        list_concat(
            coalesce(
                list_transform(  -- noqa: LT01
                    score_keys,
                    lambda k, i: struct_pack(
                        doc_id := k,
                        grade := score_values[i],
                        rank := list_position(retrieved_ids, k)
                    )
                ),
                []
            ),
            coalesce(
                list_transform(
                    case
                        when label_ids is null then list_distinct(relevant_ids)
                        -- a relevant id is new when the entry before it is not its grade's
                        else list_transform(
                            list_filter(  -- noqa: LT01
                                label_ids,
                                lambda e, k: e.from_relevant
                                and (k = 1 or label_ids[k - 1].d <> e.d)
                            ),
                            lambda e: e.d
                        )
                    end,
                    lambda d: struct_pack(
                        doc_id := d, grade := 1.0::double, rank := list_position(retrieved_ids, d)
                    )
                ),
                []
            )
        ) as labels,
        reason is null
        and $partition_date::date is not null
        and (served_at at time zone 'UTC')::date <> $partition_date::date as outside_partition_day
    from sorted_ids
),

-- a trace_id seen before (earlier file, then earlier line, or an earlier piece of this ingestion:
-- `seen_trace_ids`) quarantines the later record; found over the narrow columns only, so the
-- window does not carry the id lists
repeated_trace_ids as (
    select
        seen.file_order,
        seen.source_line,
        seen.first_file,
        seen.first_line,
        rtrim(raw_records.raw_record, chr(10)) as raw_record
    from (
        select
            file_order,
            source_line,
            in_piece,
            first_value(source_file) over by_trace as first_file,
            first_value(source_line) over by_trace as first_line,
            row_number() over by_trace as occurrence
        from (
            select
                trace_id,
                file_order,
                source_file,
                source_line,
                true as in_piece
            from shaped
            where reason is null
            union all
            select
                trace_id,
                file_order,
                source_file,
                source_line,
                false as in_piece
            from seen_trace_ids
            -- only those this piece repeats: the window then stays the size of the piece
            where trace_id in (
                select shaped.trace_id from shaped
                where shaped.reason is null
            )
        ) as occurrences
        window by_trace as (partition by trace_id order by file_order, source_line)
    ) as seen
    inner join raw_records
        on seen.file_order = raw_records.file_order and seen.source_line = raw_records.source_line
    where seen.occurrence > 1 and seen.in_piece
),

final as (
    select
        shaped.* replace (
            case when repeated.first_file is not null then 'trace_id' else shaped.field end
                as field,
            case
                when repeated.first_file is not null
                    then
                        duplicate_trace_id_reason(
                            shaped.trace_id, repeated.first_file, repeated.first_line
                        )
                else shaped.reason
            end as reason,
            case
                when repeated.first_file is not null then repeated.raw_record
                else shaped.raw_record
            end as raw_record,
            shaped.outside_partition_day and repeated.first_file is null
                as outside_partition_day
        )
    from shaped
    left join repeated_trace_ids as repeated
        on shaped.file_order = repeated.file_order and shaped.source_line = repeated.source_line
)

select * from final
