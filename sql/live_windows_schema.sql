-- Live monitoring tables, written by the live sensor (retrieval_pipeline.defs.monitoring) through
-- retrieval_pipeline.monitoring.record_events. Rows are keyed and written with `insert or replace`,
-- so a tick replayed after a crash rewrites the same rows instead of adding new ones.

-- One row per closed window, segment (`__all__`: every segment pooled) and metric; the metric
-- `coverage` is labelled / sampled. Windows are fixed spans of trace time, [window_start,
-- window_end); `late` traces arrived after their own window had closed and are counted here.
create table if not exists live_window_metrics (
    window_index bigint not null,       -- 1, 2, ... in the order windows closed
    window_start timestamptz not null,
    window_end timestamptz not null,
    segment varchar not null,
    metric varchar not null,            -- canonical name (mrr, precision@5) or coverage
    value double,                       -- mean over labelled sampled traces; null without any
    records bigint not null,            -- valid traces seen in the window and segment
    sampled bigint not null,            -- of which in the deterministic sample
    labelled bigint not null,           -- of which with labels (scored)
    late bigint not null,               -- whole window: traces counted here after their own closed
    partial boolean not null,           -- closed early because the input ended
    primary key (window_start, window_end, segment, metric)
);

-- One row per alert (a sustained drop opened) and per recovery (it closed). An alert is open
-- while no recovery with the same segment, metric and alert_window_start follows it.
create table if not exists live_alerts (
    event varchar not null,             -- alert or recovery
    segment varchar not null,
    metric varchar not null,
    window_index bigint not null,       -- the window that opened (or closed) the alert
    window_start timestamptz not null,
    window_end timestamptz not null,
    value double not null,              -- that window's mean
    threshold double,
    baseline double,                    -- trailing baseline at that window, when there was one
    margin double,
    alert_window_start timestamptz not null,  -- start of the window that opened the alert
    reason varchar not null,            -- in words
    primary key (segment, metric, event, alert_window_start)
);
