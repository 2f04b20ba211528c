-- One warehouse table's rows from a shard's Parquet file, less those of the valid records
-- repeated across shards (`shard_repeated`, sql/int_shard_repeated_trace_ids.sql: within a shard
-- a trace_id is valid at most once, so shard and trace_id name a record's rows): the file the
-- merge places beside the warehouse in place of a shard's own (warehouse/shards.py). Parameter:
-- $files, the shard's Parquet file of the table (each row carrying its `shard`, kept).

with

shard_rows as (
    select *
    from read_parquet($files, hive_partitioning = false)
),

final as (
    select shard_rows.*
    from shard_rows
    anti join shard_repeated
        on shard_rows.shard = shard_repeated.shard and shard_rows.trace_id = shard_repeated.trace_id
)

select * from final
