-- Alerts and recoveries as rows of live_alerts.
-- Parameters: parallel lists of equal length $event_list, $segment_list, $metric_list,
-- $window_index_list, $window_start_list, $window_end_list, $value_list, $threshold_list,
-- $baseline_list, $margin_list, $alert_window_start_list, $reason_list
-- (see retrieval_pipeline.monitoring.alert_rows).

with

rows as (
    select
        unnest($event_list::varchar[]) as event,
        unnest($segment_list::varchar[]) as segment,
        unnest($metric_list::varchar[]) as metric,
        unnest($window_index_list::bigint[]) as window_index,
        unnest($window_start_list::timestamptz[]) as window_start,
        unnest($window_end_list::timestamptz[]) as window_end,
        unnest($value_list::double[]) as value,
        unnest($threshold_list::double[]) as threshold,
        unnest($baseline_list::double[]) as baseline,
        unnest($margin_list::double[]) as margin,
        unnest($alert_window_start_list::timestamptz[]) as alert_window_start,
        unnest($reason_list::varchar[]) as reason
),

final as (
    select * from rows
)

select * from final
