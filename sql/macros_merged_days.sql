-- The rows of a table left in Parquet beside the warehouse (a sharded day's shards' files, the
-- traces an ingestion wrote there), created with the table's view by
-- retrieval_pipeline/warehouse/merged_days.py: `files`, the files of the runs registered in
-- `merged_parts` for the table, each named (partition_date=D/run=R/shard-N.parquet), so that
-- DuckDB knows their rows. A day's partition filter prunes the other days' files.
create or replace temp macro merged_day_rows(files) as table
    select * exclude (run, shard)
    from
        read_parquet(
            files,
            hive_partitioning = true,
            hive_types = { 'partition_date': date, 'run': varchar }
        );
