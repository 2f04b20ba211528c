-- Empty the days [$start_date, $end_date] of `stage_gains` before they are written again.
delete from stage_gains
where partition_date between $start_date and $end_date
