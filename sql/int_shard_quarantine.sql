-- The quarantine rows of a sharded day as one process writes them: every shard's rows, a repeated
-- trace_id's reason naming the trace_id's first valid record over all shards (a shard names its
-- own first), and the valid records repeated across shards (`shard_repeated`,
-- sql/int_shard_repeated_trace_ids.sql) with their text (`shard_repeated_texts`: file_order,
-- source_line, raw_record). The reason's words are sql/stg_trace_records.sql's.
-- Parameters: $day, $files (the shards' quarantine Parquet files).

with

quarantined as (
    select *
    from read_parquet($files, hive_partitioning = false)
),

-- only the trace_ids a shard quarantined as repeated are looked up among the valid ids of the
-- trace_ids valid in several shards (`shard_valid_ids`): one valid in its shard alone keeps the
-- reason the shard gave, which names that record
repeated_ids as (
    select distinct trace_id
    from quarantined
    where field = 'trace_id' and is_duplicate_trace_id_reason(reason)
),

first_valid as (
    select
        valid.trace_id,
        arg_min(valid.source_file, struct_pack(valid.file_order, valid.source_line)) as first_file,
        arg_min(valid.source_line, struct_pack(valid.file_order, valid.source_line)) as first_line
    from shard_valid_ids as valid
    semi join repeated_ids on valid.trace_id = repeated_ids.trace_id
    group by valid.trace_id
),

shard_rows as (
    select
        quarantined.partition_date,
        quarantined.source_file,
        quarantined.source_line,
        quarantined.trace_id,
        quarantined.field,
        quarantined.raw_record,
        case
            when
                quarantined.field = 'trace_id'
                and is_duplicate_trace_id_reason(quarantined.reason)
                and first_valid.trace_id is not null
                then
                    duplicate_trace_id_reason(
                        quarantined.trace_id, first_valid.first_file, first_valid.first_line
                    )
            else quarantined.reason
        end as reason
    from quarantined
    left join first_valid on quarantined.trace_id = first_valid.trace_id
),

repeated_rows as (
    select
        $day::date as partition_date,
        repeated.source_file,
        repeated.source_line,
        repeated.trace_id,
        'trace_id' as field,
        rtrim(texts.raw_record, chr(10)) as raw_record,
        duplicate_trace_id_reason(repeated.trace_id, repeated.first_file, repeated.first_line)
            as reason
    from shard_repeated as repeated
    inner join shard_repeated_texts as texts
        on repeated.file_order = texts.file_order and repeated.source_line = texts.source_line
),

final as (
    select * from shard_rows
    union all
    select * from repeated_rows
)

select * from final
