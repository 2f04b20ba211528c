-- Where the labels of partition $day came from: its annotated traces per variant and label source
-- (the trace's label_source, e.g. "human" or "clicks"; "unnamed" when it names none), for the
-- regression report's line on each source's share. Annotated as query_metrics marks it, read
-- through one metric's rows: a day's rows are written by one statement that crosses every trace
-- with the same metrics, so each trace has one row of each metric and the same is_annotated in
-- all (a distinct over every metric's rows took about twice as long at a million traces).

with

annotated as (
    select
        partition_date,
        trace_id
    from query_metrics
    where
        partition_date = $day
        and is_annotated
        and metric = (
            select min(day_metrics.metric) from query_metrics as day_metrics
            where day_metrics.partition_date = $day
        )
),

final as (
    select
        traces.variant,
        coalesce(nullif(traces.label_source, ''), 'unnamed') as label_source,
        count(*) as annotated_traces
    from traces
    inner join annotated
        on
            traces.partition_date = annotated.partition_date
            and traces.trace_id = annotated.trace_id
    where traces.partition_date = $day
    group by traces.variant, coalesce(nullif(traces.label_source, ''), 'unnamed')
)

select * from final
order by variant, label_source
