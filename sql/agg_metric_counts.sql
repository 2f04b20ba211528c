-- Trace counts behind `query_metrics` for partitions $start_date..$end_date (by_judgments:
-- annotated by the judgments, not by labels of their own; empty_results: nothing retrieved),
-- read from the rows of one of the metrics they were computed with ($metric):
-- engine.compute_query_metrics writes every
-- trace of those partitions once per metric, so these rows are its traces, one each, without a
-- distinct over every metric's rows (at 1M traces 5M rows, 0.12-0.2 s).

with

per_trace as (
    select
        query_metrics.is_annotated,
        query_metrics.n_relevant,
        -- annotated without labels of its own: by the judgments (warehouse.judgments)
        query_metrics.is_annotated and not traces.is_judged as by_judgments,
        -- an empty result (nothing retrieved): scored 0 when annotated, counted apart
        traces.n_retrieved = 0 as is_empty
    from query_metrics
    inner join traces
        on
            query_metrics.partition_date = traces.partition_date
            and query_metrics.trace_id = traces.trace_id
    where
        query_metrics.partition_date between $start_date and $end_date
        and query_metrics.metric = $metric
),

final as (
    select
        count(*) as traces,
        count(*) filter (where is_annotated) as annotated,
        count(*) filter (where is_annotated and n_relevant = 0) as no_relevant,
        count(*) filter (where by_judgments) as by_judgments,
        count(*) filter (where is_empty and is_annotated) as empty_results
    from per_trace
)

select * from final
