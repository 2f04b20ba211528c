"""The nightly schedule ships running and the live sensor stopped, as the instance reads them
(what `dagster dev` and the daemon act on); variables and the UI's toggle change that
(issue 34, item 1)."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest
from dagster._core.remote_representation.external import RemoteRepository
from dagster._core.scheduler.instigation import InstigatorStatus
from dagster._core.test_utils import in_process_test_workspace
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from retrieval_pipeline.defs import defs
from retrieval_pipeline.defs.live.sensor import build_live_monitoring_sensor
from retrieval_pipeline.defs.schedules import build_nightly_schedule
from retrieval_pipeline.environment import EnvironmentValueError, live_sensor_running


@pytest.fixture
def loaded() -> Iterator[tuple[dg.DagsterInstance, RemoteRepository]]:
    """The definitions loaded as a code location of a test instance."""
    origin = LoadableTargetOrigin(module_name="retrieval_pipeline.defs")
    with (
        dg.instance_for_test() as instance,
        in_process_test_workspace(instance, origin) as workspace,
    ):
        (entry,) = workspace.get_code_location_entries().values()
        assert entry.code_location is not None
        (repository,) = entry.code_location.get_repositories().values()
        yield instance, repository


def test_the_schedule_runs_and_the_sensor_is_stopped_by_default(
    loaded: tuple[dg.DagsterInstance, RemoteRepository],
) -> None:
    assert defs.resolve_schedule_def("nightly_schedule").default_status == (
        dg.DefaultScheduleStatus.RUNNING
    )
    instance, repository = loaded
    schedule = repository.get_schedule("nightly_schedule")
    stored = instance.get_instigator_state(schedule.get_remote_origin_id(), schedule.selector_id)
    assert stored is None  # nothing toggled: the state is the code's default
    state = schedule.get_current_instigator_state(stored)
    assert state.status == InstigatorStatus.DECLARED_IN_CODE and state.is_running
    sensor = repository.get_sensor("live_retrieval_monitor")
    stored = instance.get_instigator_state(sensor.get_remote_origin_id(), sensor.selector_id)
    assert not sensor.get_current_instigator_state(stored).is_running

    # the UI's "stop" is stored in the instance and wins over the default
    instance.stop_schedule(schedule.get_remote_origin_id(), schedule.selector_id, schedule)
    stored = instance.get_instigator_state(schedule.get_remote_origin_id(), schedule.selector_id)
    assert not schedule.get_current_instigator_state(stored).is_running


def test_variables_switch_the_schedule_off_and_the_sensor_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RETRIEVAL_PIPELINE_SCHEDULE", "0")
    assert build_nightly_schedule().default_status == dg.DefaultScheduleStatus.STOPPED
    monkeypatch.setenv("RETRIEVAL_PIPELINE_SCHEDULE", "yes")
    assert build_nightly_schedule().default_status == dg.DefaultScheduleStatus.RUNNING
    assert live_sensor_running({"RETRIEVAL_PIPELINE_LIVE_SENSOR": "1"})
    assert not live_sensor_running({})
    status = dg.DefaultSensorStatus.RUNNING
    assert build_live_monitoring_sensor(default_status=status).default_status == status
    monkeypatch.setenv("RETRIEVAL_PIPELINE_SCHEDULE", "sometimes")
    with pytest.raises(EnvironmentValueError, match="RETRIEVAL_PIPELINE_SCHEDULE"):
        build_nightly_schedule()
