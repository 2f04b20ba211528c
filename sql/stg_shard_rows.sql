-- One warehouse table's rows from the shards of a day, less those of the valid records repeated
-- across shards (`shard_repeated`, sql/int_shard_repeated_trace_ids.sql: within a shard a
-- trace_id is valid at most once, so shard and trace_id name a record's rows). Parameter:
-- $files, the shards' Parquet files of the table (each row carrying its `shard`).

with

shard_rows as (
    select *
    from read_parquet($files, hive_partitioning = false)
),

final as (
    select shard_rows.* exclude (shard)
    from shard_rows
    anti join shard_repeated
        on shard_rows.shard = shard_repeated.shard and shard_rows.trace_id = shard_repeated.trace_id
)

select * from final
