"""Every impossible combination is refused before Spark starts, with a line that says what fits."""

import json
import time

import pytest

from speedlayer.core.errors import ConfigError, SinkError, SourceError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run_state import prepare_state
from speedlayer.runtime.settings import RunSettings


def plan(**kwargs):
    return plan_run(RunSettings(job="fleet", **kwargs))


def test_defaults_select_windows_and_alerts_on_the_console():
    p = plan()
    assert [(q.output.name, q.sink.scheme, q.mode) for q in p.queries] == [
        ("windows", "console", "append"), ("alerts", "console", "append")]
    assert p.temporary_state and not p.params.stateless


def test_a_job_object_that_is_not_registered_is_planned_under_its_own_name():
    from dataclasses import replace

    from speedlayer.pipelines.wordcount import WORDCOUNT

    mine = replace(WORDCOUNT, name="my-words")
    assert plan_run(RunSettings(job="my-words", source="socket://localhost:9999"), job=mine).job.name == "my-words"
    with pytest.raises(ConfigError, match="the settings name job 'fleet' but the job given is 'my-words'"):
        plan_run(RunSettings(job="fleet"), job=mine)


@pytest.mark.parametrize("kwargs,match", [
    ({"sinks": {"speeds": "console:"}}, "has no output 'speeds': its outputs are windows, sliding, alerts, dead-letters"),
    # --- speeding incidents and late events ---
    ({"sinks": {"incidents": "console:"}, "incident_after": "0s"}, "--incident-after must be longer than zero"),
    ({"sinks": {"incidents": "console:"}, "incident_timeout": "-5s"}, "invalid --incident-timeout '-5s'"),
    ({"sinks": {"incidents": "parquet:out/i"}, "incident_updates": True},
     "--incident-updates emits an open incident more than once"),
    ({"sinks": {"incidents": "console:"}, "incident_initial_state": "/nonexistent/open.parquet"}, "no such file or directory"),
    ({"trigger": "continuous:1s", "sinks": {"incidents": "console:"}}, "'incidents' keeps state"),
    ({"trigger": "continuous:1s", "sinks": {"late": "console:"}}, "'late' keeps state"),
    ({"sinks": {"late": "console:"}, "output_mode": {"late": "complete"}}, "'late' cannot be written in complete mode"),
    ({"sinks": {"windows": "parquet:out/w"}, "output_mode": {"windows": "update"}}, "sink parquet: takes append mode only"),
    ({"sinks": {"alerts": "console:"}, "output_mode": {"*": "complete"}},
     "'alerts' cannot be written in complete mode: it fits append, update"),
    ({"output_mode": {"*": "upsert"}}, "unknown output mode 'upsert'"),
    ({"trigger": "continuous:1s"}, "'windows' keeps state.*select only alerts, dead-letters"),
    ({"trigger": "continuous:1s", "sinks": {"alerts": "parquet:out/a"}}, "cannot take continuous output"),
    ({"trigger": "continuous:1s", "sinks": {"alerts": "console:"}, "output_mode": {"alerts": "update"}},
     "continuous mode writes append only"),
    ({"sinks": {"windows": "parquet:out/x", "alerts": "parquet:out/x"}}, "both write to"),
    ({"sinks": {"windows": "postgresql://u@db/fleet?table=t", "alerts": "postgresql://u@db/fleet?table=t"}},
     "both write to the same PostgreSQL table"),
    ({"sinks": {"windows": "nats://h/t"}}, "^--sink windows: unknown sink scheme 'nats'"),
    ({"sinks": {"windows": "console:", "alerts": "postgresql://app@db:54x2/fleet"}},
     r"^--sink alerts: sink URI 'postgresql://app@db:54x2/fleet': port '54x2' is not a number"),
    ({"source": "nats://h"}, "unknown source scheme 'nats'"),
    ({"window": "0s"}, "--window must be longer than zero"),
    ({"slide": "2min"}, "--slide 2min is longer than the sliding window 1min"),
    ({"source": "generator://?late=2"}, "option 'late'"),
    ({"source": "generator://?speed=2"}, "has no option 'speed'"),
    ({"source": "files:///x?format=xml"}, "option 'format'"),
    # sources that cannot count what they read: refused here, before any lock, manifest or Spark session
    ({"source": "files:///x", "max_events": 10}, "files:// does not count the events it reads; .*--trigger available-now"),
    ({"source": "kafka://127.0.0.1:9/t", "max_events": 10}, "kafka:// does not count .*available-now or --duration"),
    ({"source": "socket://127.0.0.1:9", "max_events": 10}, "socket:// does not count .*--duration"),
    ({"source": "shopfeed://", "max_events": 10}, "shopfeed:// does not count .*--duration"),  # a plug-in's own
])
def test_impossible_runs_are_refused_before_start(kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        plan(**kwargs)
    assert "\n" not in str(err.value)


def test_initial_state_table_with_wrong_columns_is_refused_before_start(tmp_path):
    table = tmp_path / "open.csv"
    table.write_text("vehicle_id,started_at\nV1,2026-11-22 10:00:00\n")
    told = r"lacks column\(s\) ended_at, zone_id.*it needs vehicle_id, started_at, ended_at"
    with pytest.raises(ConfigError, match=told) as err:
        plan(sinks={"incidents": "console:"}, incident_initial_state=str(table))
    assert "\n" not in str(err.value)


def test_incident_settings_reach_the_pipeline():
    p = plan(sinks={"incidents": "console:"}, output_mode={"incidents": "update"}, incident_after="4s",
             incident_timeout="1min", incident_updates=True)
    opts = p.params.options
    assert (opts.incident_after_ms, opts.incident_timeout_ms, opts.incident_updates) == (4000, 60_000, True)


def test_continuous_alerts_run_without_deduplication():
    p = plan(trigger="continuous:1s", sinks={"alerts": "console:"})
    assert p.trigger.continuous and p.params.stateless
    assert any("at-least-once" in note for note in p.notes)


def test_missing_landing_directory_is_reported_before_start(tmp_path):
    p = plan(source=f"files://{tmp_path}/missing", state_dir=str(tmp_path / "st"))
    with pytest.raises(SourceError, match="landing directory .*missing does not exist"):
        prepare_state(p)


def test_output_of_another_run_is_not_silently_skipped(tmp_path):
    out = tmp_path / "windows" / "_spark_metadata"
    out.mkdir(parents=True)
    (out / "0").write_text("v1")
    p = plan(sinks={"windows": f"parquet://{tmp_path}/windows"}, state_dir=str(tmp_path / "st"))
    with pytest.raises(SinkError, match="already holds the output of another run"):
        prepare_state(p)


def test_a_state_directory_belongs_to_one_job(tmp_path):
    p = plan(state_dir=str(tmp_path / "st"), source="generator://?seed=3")
    prepare_state(p)
    manifest = (tmp_path / "st" / "speedlayer-run.json").read_text().replace('"fleet"', '"wordcount"')
    (tmp_path / "st" / "speedlayer-run.json").write_text(manifest)
    with pytest.raises(ConfigError, match="belongs to job 'wordcount'"):
        prepare_state(plan(state_dir=str(tmp_path / "st")))


def test_generator_start_is_pinned_across_restarts(tmp_path):
    first = plan(state_dir=str(tmp_path / "st"))
    prepare_state(first)
    again = plan(state_dir=str(tmp_path / "st"))
    prepare_state(again)
    assert again.source.start_ms == first.source.start_ms


def recorded_start(state_dir) -> int:
    return json.loads((state_dir / "speedlayer-run.json").read_text())["run_state"]["generator_start_ms"]


def test_a_fresh_runs_generator_clock_starts_when_its_queries_do(tmp_path):
    """The clock chosen while planning is chosen again right before the first query starts (Spark's
    start-up would otherwise make every event seconds old), and recorded; a resume keeps it."""
    first = plan(state_dir=str(tmp_path / "st"))
    first_state = prepare_state(first)
    chosen = first.source.start_ms
    assert recorded_start(tmp_path / "st") == chosen
    time.sleep(0.05)
    first_state.pin_at_start()
    assert first.source.start_ms >= chosen + 50
    assert recorded_start(tmp_path / "st") == first.source.start_ms

    again = plan(state_dir=str(tmp_path / "st"))
    prepare_state(again).pin_at_start()
    assert again.source.start_ms == first.source.start_ms  # a resume keeps the recorded clock


def test_a_generator_start_given_is_never_moved(tmp_path):
    given = plan(state_dir=str(tmp_path / "st"), source="generator://?start=2026-11-22T10:00:00Z")
    prepare_state(given).pin_at_start()
    assert given.source.start_ms == recorded_start(tmp_path / "st") == 1795341600000


# --- real-time mode and source notes ------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"trigger": "realtime:1min", "sinks": {"alerts": "console:"}},
     r"source generator:// cannot be read in real-time mode .*use a kafka:// source"),
    ({"trigger": "realtime:1min", "source": "files:///x", "sinks": {"alerts": "console:"}},
     "source files:// cannot be read in real-time mode"),
    ({"trigger": "realtime:2s", "source": "kafka://k:9092/t", "sinks": {"alerts": "console:"}},
     r"shorter than real-time mode's minimum batch duration 5s .*use realtime:5s"),
    ({"trigger": "realtime:1min", "source": "kafka://k:9092/t", "sinks": {"alerts": "parquet:out/a"}},
     "sink parquet: cannot take real-time output"),
    ({"trigger": "realtime:1min", "source": "kafka://k:9092/t", "sinks": {"alerts": "memory:a"}},
     "sink memory: cannot take real-time output"),
    ({"trigger": "realtime:1min", "source": "kafka://k:9092/t", "sinks": {"alerts": "console:"},
      "output_mode": {"alerts": "append"}}, "real-time mode writes update only: use --output-mode alerts=update"),
    ({"trigger": "realtime:1min", "source": "kafka://k:9092/t", "sinks": {"windows": "console:"}},
     r"output 'windows' keeps state \(windows\), which real-time mode cannot do: .*select only"),
])
def test_realtime_runs_are_refused_before_start(kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        plan(**kwargs)
    assert "\n" not in str(err.value)


def test_realtime_on_kafka_writes_update_to_the_console():
    p = plan(trigger="realtime:", source="kafka://k:9092/t", sinks={"alerts": "console:", "dead-letters": "console:"})
    assert p.trigger.realtime and p.trigger.interval_ms == 300_000 and p.params.stateless
    assert [q.mode for q in p.queries] == ["update", "update"]


def test_realtime_minimum_follows_sparks_conf():
    conf = {"spark.sql.streaming.realTimeMode.minBatchDuration": "1000"}
    assert plan(trigger="realtime:2s", source="kafka://k:9092/t", sinks={"alerts": "console:"}, conf=conf).trigger.realtime


def test_source_warnings_become_plan_notes():
    p = plan(source="socket://localhost:9999", sinks={"alerts": "console:"})
    assert any("not fault-tolerant" in note for note in p.notes)


# --- allowed lateness (late data) ---

@pytest.mark.parametrize("kwargs,match", [
    ({"allowed_lateness": "0"}, "--allowed-lateness must be longer than zero"),
    ({"allowed_lateness": "-5s"}, "invalid --allowed-lateness '-5s'"),
    ({"allowed_lateness": "soon"}, "invalid --allowed-lateness 'soon'"),
    ({"allowed_lateness": "30s", "output_mode": {"windows": "complete"}},
     "'windows' cannot be written in complete mode: it fits update, append \\(with --allowed-lateness"),
    ({"allowed_lateness": "30s", "sinks": {"windows": "parquet:out/w"}}, "sink parquet: takes append mode only.*windows=append"),
])
def test_allowed_lateness_mistakes_are_one_line(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        plan(**kwargs)
    assert "\n" not in str(info.value)


def test_allowed_lateness_is_for_the_fleet_job_only():
    with pytest.raises(ConfigError, match="unknown setting 'allowed_lateness': .*job 'wordcount' options are "
                                          "lowercase, split, strip_punctuation"):
        plan_run(RunSettings(job="wordcount", allowed_lateness="30s"))
    with pytest.raises(ConfigError, match="unknown setting 'allowed_lateness': known settings are"):
        plan_run(RunSettings(job="app-actions", allowed_lateness="30s"))


def test_allowed_lateness_writes_windows_as_corrections():
    off = plan(sinks={"windows": "console:"})
    assert (off.params.options.allowed_lateness_ms, off.queries[0].mode, off.queries[0].output.key_in("append")) == \
        (0, "append", ("window_start", "window_end", "vehicle_id"))
    on = plan(allowed_lateness="30s", sinks={"windows": "console:", "alerts": "console:"})
    windows, alerts = on.queries
    assert on.params.options.allowed_lateness_ms == 30_000
    # update by default: a correction replaces the window by its key
    assert (windows.mode, windows.output.key_in(windows.mode)) == ("update", ("window_start", "window_end", "vehicle_id"))
    assert alerts.mode == "append"
    # append keeps every revision, so the revision is part of the key
    kept = plan(allowed_lateness="30s", sinks={"windows": "parquet:out/w"}, output_mode={"windows": "append"}).queries[0]
    assert kept.output.key_in(kept.mode) == ("window_start", "window_end", "vehicle_id", "revision")
