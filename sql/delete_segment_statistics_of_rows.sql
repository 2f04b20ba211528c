-- The segment_statistics computed from the rows of partitions $start_date..$end_date (inclusive),
-- before they are computed again (sql/agg_segment_statistics.sql); a sharded day's pooled ones
-- (shards > 0) stay.
delete from segment_statistics
where
    partition_date between $start_date and $end_date
    and shards = 0
