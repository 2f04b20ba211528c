-- The valid records of a sharded day that repeat a trace_id valid in another shard: one process
-- keeps a trace_id's first valid record (earlier file, then earlier line) and quarantines every
-- later one (sql/stg_trace_records.sql); a shard keeps its own first, so across shards every
-- record but the first of its trace_id is repeated here, with the first's file and line.
-- Input: `shard_valid_ids` (shard, trace_id, file_order, source_file, source_line), the valid
-- records of every shard whose trace_id is valid in another shard too
-- (sql/stg_shard_shared_valid_ids.sql), each trace_id at most once per shard.

with

occurrences as (
    select
        shard,
        trace_id,
        file_order,
        source_file,
        source_line,
        first_value(source_file) over by_trace as first_file,
        first_value(source_line) over by_trace as first_line,
        row_number() over by_trace as occurrence
    from shard_valid_ids
    window by_trace as (partition by trace_id order by file_order, source_line)
),

final as (
    select
        shard,
        trace_id,
        file_order,
        source_file,
        source_line,
        first_file,
        first_line
    from occurrences
    where occurrence > 1
)

select * from final
