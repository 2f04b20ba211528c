-- One closed live window as rows of live_window_metrics: one per segment and metric.
-- Parameters: $window_index, $window_start, $window_end, $late, $partial, and parallel lists of
-- equal length $segment_list, $metric_list, $value_list, $records_list, $sampled_list,
-- $labelled_list (see retrieval_pipeline.monitoring.window_rows). A null value is a window
-- segment without labels: no mean, not 0.

with

rows as (
    select
        unnest($segment_list::varchar[]) as segment,
        unnest($metric_list::varchar[]) as metric,
        unnest($value_list::double[]) as value,
        unnest($records_list::bigint[]) as records,
        unnest($sampled_list::bigint[]) as sampled,
        unnest($labelled_list::bigint[]) as labelled
),

final as (
    select
        $window_index::bigint as window_index,
        $window_start::timestamptz as window_start,
        $window_end::timestamptz as window_end,
        segment,
        metric,
        value,
        records,
        sampled,
        labelled,
        $late::bigint as late,
        $partial::boolean as partial
    from rows
)

select * from final
