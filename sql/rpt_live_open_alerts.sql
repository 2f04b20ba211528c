-- Live alerts still open: an alert row with no recovery row for the same segment, metric and
-- alert_window_start. Oldest first. Read by the live_sustained_drop asset check.

with

alerts as (
    select * from live_alerts
    where event = 'alert'
),

recoveries as (
    select * from live_alerts
    where event = 'recovery'
),

final as (
    select
        alerts.segment,
        alerts.metric,
        alerts.reason,
        alerts.window_index,
        alerts.window_start,
        alerts.window_end,
        alerts.value,
        alerts.threshold,
        alerts.baseline,
        alerts.margin
    from alerts
    anti join recoveries
        on
            alerts.segment = recoveries.segment
            and alerts.metric = recoveries.metric
            and alerts.alert_window_start = recoveries.alert_window_start
    order by alerts.window_start, alerts.segment, alerts.metric
)

select * from final
