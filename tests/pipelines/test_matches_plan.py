"""Ride matching runs are checked before Spark starts: where the ride requests come from, and the settings."""

import json
import time
from dataclasses import replace

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.fleet.schemas import RIDE_REQUEST
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run_state import prepare_state
from speedlayer.runtime.settings import RunSettings

MATCHES = {"matches": "console:"}


def plan(**kwargs):
    return plan_run(RunSettings(job="fleet", **kwargs))


def test_a_generator_run_reads_ride_requests_from_the_same_generator():
    p = plan(source="generator://?seed=7&rate=300&vehicles=40", sinks=MATCHES, match_within="4s", match_cell=250)
    rides = p.inputs["rides"]
    assert rides.options.kind == "rides"
    assert (rides.options.seed, rides.options.rate, rides.options.vehicles) == (7, 300, 40)
    assert (p.params.options.match_within_ms, p.params.options.match_cell_m) == (4000, 250)
    assert [(q.output.name, q.mode) for q in p.queries] == [("matches", "append")]


def test_rides_from_another_source_are_read_with_the_ride_request_schema(tmp_path):
    p = plan(source="files:///landing/pings", rides=f"files://{tmp_path}?format=csv", sinks=MATCHES)
    # the ride schema, with the run's --max-ahead (default: a fifth of the 5 s watermark)
    assert p.inputs["rides"].event_schema == replace(RIDE_REQUEST, max_ahead_ms=1000)
    assert p.source.event_schema.name == "vehicle ping"


def test_rides_are_not_read_when_no_output_needs_them():
    p = plan(rides="generator://?kind=rides", sinks={"windows": "console:"})
    assert p.inputs == {}
    assert any("--rides is read only by matches, ride-dead-letters" in note for note in p.notes)


@pytest.mark.parametrize("kwargs,match", [
    ({"match_within": "0"}, "--match-within must be longer than zero"),
    ({"match_within": "soon"}, "invalid --match-within 'soon'"),
    ({"match_cell": 0}, "--match-cell is the grid cell size in metres and must be above zero"),
    ({"match_cell": -50}, "--match-cell .* above zero"),
    ({"rides": "nope"}, "--rides: source URI 'nope' has no scheme"),
    ({"rides": "nats://h/rides"}, "--rides: unknown source scheme 'nats'"),
    ({"rides": "generator://?kind=bikes"}, "option 'kind': unknown kind 'bikes'"),
    ({"source": "files:///landing"}, r"output 'matches' joins a second stream, rides: give its source with --rides URI"),
    ({"output_mode": {"matches": "update"}}, "'matches' cannot be written in update mode: it fits append"),
    ({"output_mode": {"matches": "complete"}}, "'matches' cannot be written in complete mode: it fits append"),
    ({"trigger": "continuous:1s"}, "'matches' keeps state"),
])
def test_bad_matching_runs_are_refused_before_start(kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        plan(**{"sinks": MATCHES, **kwargs})
    assert "\n" not in str(err.value)


def test_other_jobs_take_no_rides():
    with pytest.raises(ConfigError, match="job 'wordcount' reads no second stream rides: drop --rides"):
        plan_run(RunSettings(job="wordcount", rides="generator://?kind=rides"))


def test_ride_requests_share_the_generators_clock_across_restarts(tmp_path):
    first = plan(state_dir=str(tmp_path / "st"), source="generator://?seed=3", sinks=MATCHES)
    prepare_state(first)
    assert first.inputs["rides"].start_ms == first.source.start_ms
    again = plan(state_dir=str(tmp_path / "st"), source="generator://?seed=3", sinks=MATCHES)
    prepare_state(again)
    assert again.inputs["rides"].start_ms == again.source.start_ms == first.source.start_ms


def test_ride_requests_keep_the_generators_clock_when_it_starts_with_the_queries(tmp_path):
    p = plan(state_dir=str(tmp_path / "st"), source="generator://?seed=3", sinks=MATCHES)
    state = prepare_state(p)
    chosen = p.source.start_ms
    time.sleep(0.05)
    state.pin_at_start()
    assert p.inputs["rides"].start_ms == p.source.start_ms > chosen
    state = json.loads((tmp_path / "st" / "speedlayer-run.json").read_text())["run_state"]
    assert state["generator_start_ms"] == state["inputs"]["rides"]["generator_start_ms"] == p.source.start_ms


def test_a_rides_generator_with_its_own_start_keeps_it_apart(tmp_path):
    p = plan(state_dir=str(tmp_path / "st"), source="generator://?seed=3", sinks=MATCHES,
             rides="generator://?kind=rides&start=2026-11-22T10:00:00Z")
    prepare_state(p)
    assert p.inputs["rides"].start_ms == 1795341600000 != p.source.start_ms
    state = json.loads((tmp_path / "st" / "speedlayer-run.json").read_text())["run_state"]
    assert state["generator_start_ms"] == p.source.start_ms
    assert state["inputs"]["rides"]["generator_start_ms"] == 1795341600000
