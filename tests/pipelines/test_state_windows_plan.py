"""Settings of trips, congestion and count windows: refused before start with one line that says what fits."""

import pytest

from speedlayer.cli.app import main
from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings


def plan(**kwargs):
    return plan_run(RunSettings(job="fleet", **kwargs))


def test_new_outputs_take_their_defaults_and_settings():
    p = plan(sinks={"trips": "console:", "congestion": "console:", "count-windows": "console:"},
             trip_gap="10min", count_window=5)
    assert [(q.output.name, q.mode) for q in p.queries] == [
        ("trips", "append"), ("congestion", "update"), ("count-windows", "append")]
    assert (p.params.options.trip_gap_ms, p.params.options.count_window) == (600_000, 5)
    assert {"trips", "congestion", "count-windows"}.isdisjoint(p.job.default_outputs)


@pytest.mark.parametrize("kwargs,match", [
    ({"count_window": 0}, "--count-window must be a number of pings of at least 1 \\(got 0\\)"),
    ({"count_window": -3}, "at least 1 \\(got -3\\)"),
    ({"trip_gap": "0s"}, "--trip-gap must be longer than zero"),
    ({"sinks": {"trips": "console:"}, "trip_gap": "2s"},
     "--trip-gap 2s is shorter than --watermark 5s.*use --trip-gap 5s or more"),
    ({"sinks": {"trips": "console:"}, "max_trip": "5min"}, "--max-trip 300s is not longer than --trip-gap 300s"),
    ({"max_trip": "0s"}, "--max-trip must be longer than zero"),
    ({"sinks": {"trips": "console:"}, "output_mode": {"trips": "update"}},
     "'trips' cannot be written in update mode: it fits append \\(each trip is written once, when it ends"),
    ({"sinks": {"trips": "console:"}, "output_mode": {"trips": "complete"}}, "'trips' cannot be written in complete mode"),
    ({"sinks": {"count-windows": "console:"}, "output_mode": {"*": "complete"}},
     "'count-windows' cannot be written in complete mode"),
    ({"sinks": {"count-windows": "console:"}, "output_mode": {"*": "update"}},
     "'count-windows' cannot be written in update mode: it fits append"),
    ({"sinks": {"congestion": "parquet:out/c"}}, "sink parquet: takes append mode only, not update"),
    ({"sinks": {"trips": "console:"}, "trigger": "continuous:1s"}, "'trips' keeps state"),
])
def test_bad_settings_are_refused_before_start(kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        plan(**kwargs)
    assert "\n" not in str(err.value)


def test_a_short_trip_gap_only_matters_when_trips_are_selected():
    assert plan(sinks={"windows": "console:"}, trip_gap="1s").params.options.trip_gap_ms == 1000
    assert plan(sinks={"trips": "console:"}, trip_gap="1s", watermark="1s").params.options.trip_gap_ms == 1000


def test_cli_refuses_a_zero_count_window_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "fleet", "--sink", "count-windows=console:", "--count-window", "0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert [line for line in err.splitlines() if line.strip()] == [
        "error: --count-window must be a number of pings of at least 1 (got 0): e.g. --count-window 20"]
