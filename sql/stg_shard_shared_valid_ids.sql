-- The valid records of a sharded day whose trace_id is valid in more than one shard: the only
-- ones the merge's repeat rule (sql/int_shard_repeated_trace_ids.sql) and its quarantine's
-- reasons (sql/int_shard_quarantine.sql) need, since a trace_id valid in one shard alone keeps
-- that record and the reasons its shard gave. Found by grouping the trace_ids' hashes (8 bytes,
-- not the ids' text), then checked on the ids themselves: two ids of one hash are kept apart.
-- Parameter: $files, the shards' valid_ids Parquet files (shard, trace_id, file_order,
-- source_file, source_line).

with

shared_hashes as (
    select hash(trace_id) as trace_hash
    from read_parquet($files, hive_partitioning = false)
    group by trace_hash
    having count(*) > 1
),

candidates as (
    select valid.*
    from read_parquet($files, hive_partitioning = false) as valid
    semi join shared_hashes on hash(valid.trace_id) = shared_hashes.trace_hash
),

final as (
    select candidates.*
    from candidates
    qualify count(*) over (partition by candidates.trace_id) > 1
)

select * from final
