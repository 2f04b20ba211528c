-- The first $depth documents served to a few of the candidate's traces in the nightly's
-- comparison window $start_date..$end_date (inclusive), the registered relation why_pair_served
-- (partition_date, trace_id): where the unjudged documents the candidate put in a paired
-- query's top k are named. Only the traces of the queries shown whose coverage part moved the
-- delta, and only where the warehouse stores the id lists.

with

wanted as (
    select distinct
        partition_date,
        trace_id
    from why_pair_served
),

final as (
    select
        traces.trace_id,
        list_slice(traces.retrieved_ids, 1, $depth) as top_ids
    from traces
    inner join wanted
        on
            traces.partition_date = wanted.partition_date
            and traces.trace_id = wanted.trace_id
    where traces.partition_date between $start_date and $end_date
)

select * from final
