-- Empty the day $partition_date of `label_agreement` before it is written again.
delete from label_agreement
where partition_date = $partition_date
