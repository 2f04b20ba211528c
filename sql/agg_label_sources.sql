-- Where the labels of partition $day came from: its annotated traces per variant and label source
-- (the trace's label_source, e.g. "human" or "clicks"; "unnamed" when it names none), for the
-- regression report's line on each source's share. Annotated as query_metrics marks it.

with

annotated as (
    select distinct
        partition_date,
        trace_id
    from query_metrics
    where partition_date = $day and is_annotated
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
