-- Per finding, the recurring queries that moved its mean most (from the temporary table
-- why_query_changes, sql/attr_query_changes.sql), at most $top of them: ranked by contribution =
-- within + mix, in the direction of the change (the most negative first for a drop), ties by
-- query id. `place` is the rank, 1 first. A top-$top aggregate per finding (min_by with a count:
-- the smallest keys, in key order) rather than a window numbering every query of the finding:
-- the key (-direction * contribution, query_id) orders as "direction * contribution desc,
-- query_id asc" does.

with

ranked as (
    select
        segment,
        variant,
        metric,
        min_by(
            why_query_changes,
            {
                'score': -sign(day_value - base_value) * (within + mix),
                'query_id': query_id
            },
            $top
        ) as top_rows
    from why_query_changes
    where kind = 'recurring'
    group by segment, variant, metric
),

placed as (
    select
        unnest(top_rows) as query_row,
        generate_subscripts(top_rows, 1) as place
    from ranked
),

final as (
    select
        query_row.*,
        query_row.within + query_row.mix as contribution,
        place
    from placed
)

select * from final
