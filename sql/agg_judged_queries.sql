-- Judged queries and how many of them have a trace in partitions $start_date..$end_date: a judged
-- query with no trace is counted, not an error.

with

judged as (
    select distinct query_id from judgments
),

traced as (
    select distinct query_id
    from traces
    where partition_date between $start_date and $end_date
),

final as (
    select
        count(*) as judged_queries,
        count(traced.query_id) as judged_queries_with_traces,
        count(*) - count(traced.query_id) as judged_queries_without_trace
    from judged
    left join traced on judged.query_id = traced.query_id
)

select * from final
