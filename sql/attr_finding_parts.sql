-- Per finding, the parts of its change that sql/attr_query_changes.sql found per query (held in
-- the temporary table why_query_changes): the day and baseline means, the change, the recurring
-- queries' within-query change, the traffic mix, and the new and gone queries (count, traces,
-- their day mean or baseline mean). within + mix + new_part = change up to rounding.

with

final as (
    select
        segment,
        variant,
        metric,
        any_value(day_value) as day_value,
        any_value(base_value) as base_value,
        any_value(day_value) - any_value(base_value) as change,
        sum(within) as within,
        sum(mix) as mix,
        sum(new_part) as new_part,
        count(*) filter (where kind = 'recurring') as recurring_queries,
        count(*) filter (where kind = 'new') as new_queries,
        coalesce(sum(day_traces) filter (where kind = 'new'), 0) as new_traces,
        sum(day_mean * day_traces) filter (where kind = 'new')
        / nullif(sum(day_traces) filter (where kind = 'new'), 0) as new_day_mean,
        count(*) filter (where kind = 'gone') as gone_queries,
        sum(mix) filter (where kind = 'gone') as gone_part
    from why_query_changes
    group by segment, variant, metric
)

select * from final
