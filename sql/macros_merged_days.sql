-- The rows of a table that sharded merges left in Parquet beside the warehouse, created with the
-- table's view by retrieval_pipeline/warehouse/merged_days.py: `files`, a pattern over the
-- table's folder (partition_date=D/run=R/shard-N.parquet), of which only the runs registered
-- in `merged_parts` count (a day written again, or a merge that failed, leaves files behind
-- until the next merge removes them). A day's partition filter prunes the other days' files.
create or replace temp macro merged_day_rows(merged_table, files) as table
    select * exclude (run, shard)
    from
        read_parquet(
            files,
            hive_partitioning = true,
            hive_types = { 'partition_date': date, 'run': varchar }
        )
    where (partition_date, run) in (
        select
            merged_parts.partition_date,
            merged_parts.run
        from merged_parts
        where merged_parts.table_name = merged_table
    );
