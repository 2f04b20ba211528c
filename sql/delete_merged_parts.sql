-- Forget the merged files of table $table for the days [$start_date, $end_date] (a range; null
-- when the days are a list) and the days in $dates (a list; empty for a range): the day's
-- partitions of the table are being replaced.
delete from merged_parts
where
    table_name = $table
    and (
        partition_date between $start_date and $end_date
        or list_contains(cast($dates as date[]), partition_date)
    )
