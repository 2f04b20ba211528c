"""Live monitoring's Dagster objects: the `live_retrieval_metrics` asset and its
`live_sustained_drop` check (`assets`), the sensor that reports them (`sensor`), and the
`live_monitor` resource (`resources`)."""

from retrieval_pipeline.defs.live.assets import live_retrieval_metrics, live_sustained_drop
from retrieval_pipeline.defs.live.resources import LiveMonitorResource
from retrieval_pipeline.defs.live.sensor import live_monitoring_sensor

__all__ = [
    "LiveMonitorResource",
    "live_monitoring_sensor",
    "live_retrieval_metrics",
    "live_sustained_drop",
]
