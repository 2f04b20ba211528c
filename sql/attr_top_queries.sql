-- Per finding, the recurring queries that moved its mean most (from the temporary table
-- why_query_changes, sql/attr_query_changes.sql), at most $top of them: ranked by contribution =
-- within + mix, in the direction of the change (the most negative first for a drop), ties by
-- query id. `place` is the rank, 1 first.

with

ranked as (
    select
        *,
        within + mix as contribution,
        row_number() over (
            partition by segment, variant, metric
            order by
                sign(day_value - base_value) * (within + mix) desc,
                query_id asc
        ) as place
    from why_query_changes
    where kind = 'recurring'
),

final as (
    select *
    from ranked
    where place <= $top
)

select * from final
