"""app-actions: the generator's actions decode (unknown actions refused), windows count each action once."""

from datetime import datetime, timedelta

from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.decode.validate import decode
from speedlayer.pipelines.app_actions import APP_ACTION, action_counts
from speedlayer.pipelines.app_actions_kind import ACTION_MIX
from speedlayer.pipelines.base import Params
from speedlayer.runtime.settings import RunSettings
from tests.helpers import batch_output

T0 = datetime(2026, 11, 22, 10, 0, 0)


def test_unknown_and_mistyped_actions_are_dead_letters(spark):
    payloads = ['{"id": "a1", "time": "2026-11-22T10:00:00Z", "action": "click"}',
                '{"id": "a2", "time": "2026-11-22T10:00:01Z", "action": "teleport"}',
                '{"id": "a3", "time": "soon", "action": "view"}',
                '{"id": "a4", "action": "view"}']
    raw = spark.createDataFrame([(p, None, str(i), T0) for i, p in enumerate(payloads)], RAW_SCHEMA)
    decoded = decode(raw, APP_ACTION)
    assert [e.id for e in decoded.events.collect()] == ["a1"]
    reasons = sorted(r.reason for r in decoded.dead_letters.collect())
    assert reasons == ["field 'action' is not one of " + ", ".join(sorted({a for a, _ in ACTION_MIX}, key=[
        "open", "view", "click", "search", "add_to_cart", "purchase", "share", "close"].index)),
        "field 'time' is not a valid timestamp (ISO-8601 or epoch milliseconds)", "missing field 'time'"]


def test_sliding_hour_windows_count_each_action_once(spark):
    rows = [("a1", 1, "click"), ("a1", 1, "click"), ("a2", 7, "click"), ("a3", 64, "view")]  # minutes after T0
    events = spark.createDataFrame([(i, T0 + timedelta(minutes=m), a, T0) for i, m, a in rows],
                                   "id string, time timestamp, action string, ingest_time timestamp")
    counts = action_counts(events, Params(sliding_window_ms=3_600_000, slide_ms=300_000))
    got = {(r.window_start.strftime("%H:%M"), r.action): r.actions for r in counts.collect()}
    # a1 (10:01, sent twice) lies in the windows starting 09:05 ... 10:00, a2 (10:07) in 09:10 ... 10:05
    clicks = {start: n for (start, action), n in got.items() if action == "click"}
    assert clicks == {"09:05": 1, **{f"{h:02d}:{m:02d}": 2 for h, m in [(9, m) for m in range(10, 60, 5)] + [(10, 0)]},
                      "10:05": 1}
    views = {start: n for (start, action), n in got.items() if action == "view"}
    assert len(views) == 12 and set(views.values()) == {1}  # one event lies in 12 windows of 1 h every 5 min


def test_generated_actions_follow_the_mix_and_produce_dead_letters(spark):
    settings = RunSettings(job="app-actions", source="generator://?kind=actions&seed=3&start=2026-11-22T10:00:00Z&rate=10",
                           max_events=4000, output_mode={"counts": "complete"})
    counts = batch_output(spark, settings, "counts")
    dead = batch_output(spark, settings, "dead-letters")
    per_action = {r.action: r.n for r in counts.where("window_start = '2026-11-22 10:00:00'")
                  .groupBy("action").agg({"actions": "sum"}).withColumnRenamed("sum(actions)", "n").collect()}
    assert set(per_action) == {a for a, _ in ACTION_MIX}
    assert per_action["view"] > per_action["click"] > per_action["purchase"] > 0
    assert 0 < dead.count() < 40  # malformed=0.002 of 4000
