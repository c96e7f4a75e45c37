"""The dashboard's tap shows what the job computes: its own decoder, pipeline and per-batch step.

Two jobs whose decoders are not the JSON one: wordcount (text lines, a per-batch output) and a
user's job defined here with a decoder of its own. Each runs over landed files, one per
micro-batch, with the tap beside it; the rows the tap fed the dashboard for each batch must be
what a plain-Python oracle computes from that file.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter

from pyspark.sql import functions as F

from speedlayer import APPEND, Decoded, EventSchema, Field, Job, Output, Positions
from speedlayer.monitor.feed import ResultsFeed
from speedlayer.monitor.tap import start_tap
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings

T0 = 1795341600  # 2026-11-22T10:00:00Z


def land(landing, files: list[str]) -> None:
    landing.mkdir(parents=True)
    for i, text in enumerate(files):
        (landing / f"f{i}.txt").write_text(text)
        os.utime(landing / f"f{i}.txt", (T0 + i, T0 + i))


def tapped(spark, settings: RunSettings, job: Job | None = None, feed: ResultsFeed | None = None) -> dict[int, dict]:
    """Run to the end of input with the tap beside it; what it fed the dashboard, by its batch id."""
    seen: dict[int, dict] = {}
    feed = feed or ResultsFeed()
    original = feed.show_batch

    def keep(view) -> None:
        seen.setdefault(view.batch_id, {})[view.output] = view
        original(view)

    feed.show_batch = keep
    taps = []

    def on_started(run: Run) -> None:
        tap = start_tap(run, feed)
        assert tap is not None
        taps.append(tap)

    run = Run(spark, plan_run(settings, job=job), on_started=on_started)
    assert run.start_and_wait().stopped_by == "end of input"
    taps[0].awaitTermination(120)  # available-now: the tap ends at the end of input too
    return seen


def test_wordcounts_tap_shows_each_batchs_counts_as_the_job_computes_them(spark, tmp_path):
    files = ["the cat and the hat\nthe end\n", "a cat\n\nA CAT sat.\n"]
    land(tmp_path / "landing", files)
    settings = RunSettings(job="wordcount", source=f"files:{tmp_path / 'landing'}?format=text&max_files_per_trigger=1",
                           trigger="available-now", state_dir=str(tmp_path / "state"), sinks={"totals": "memory:tap_totals"})
    seen = tapped(spark, settings)
    for batch_id, text in enumerate(files):
        want = Counter(w.strip(".").lower() for w in text.split())
        view = seen[batch_id]["batch-counts"]
        assert view.columns == ["batch_id", "word", "count"]
        assert {(b, w, c) for b, w, c in view.rows} == {(batch_id, w, c) for w, c in want.items()}


def test_the_tap_starts_a_batch_each_interval_at_most_beside_back_to_back_outputs(spark, tmp_path):
    """Its map and feeds need no haste, and each of its batches costs the CPU the outputs' queries need."""
    from datetime import datetime

    land(tmp_path / "landing", [f"word{i} word\n" for i in range(4)])
    settings = RunSettings(job="wordcount", source=f"files:{tmp_path / 'landing'}?format=text&max_files_per_trigger=1",
                           trigger="processing:0s", duration=60, state_dir=str(tmp_path / "state"),
                           sinks={"totals": "memory:tap_paced"})
    taps = []

    def on_started(run: Run) -> None:
        taps.append(start_tap(run, ResultsFeed(), every_ms=2000))

    def stop_when_tapped(run: Run) -> None:
        while sum(p["numInputRows"] for p in taps[0].recentProgress) < 4:
            time.sleep(0.1)
        run.stop_requested.set()

    run = Run(spark, plan_run(settings), on_started=on_started)
    run.start()
    threading.Thread(target=stop_when_tapped, args=(run,), daemon=True).start()
    run.wait()
    taps[0].stop()  # started here, not by the run: the CLI stops it with the run
    starts = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) for p in taps[0].recentProgress
              if p["numInputRows"]]
    assert len(starts) == 4  # a file each
    # Back to back, three batches here start within two seconds; Spark starts a batch of a 2-s trigger on
    # the next multiple of 2 s after the last one's start: one start in each 2-s slot.
    slots = [int(t.timestamp() * 1000) // 2000 for t in starts]
    assert len(set(slots)) == 4, [t.isoformat() for t in starts]


ORDER = EventSchema("order line", (Field("order_id", "string"), Field("amount", "double"), Field("event_time", "timestamp")),
                    time_field="event_time")


def semicolon_lines(raw, schema=ORDER) -> Decoded:
    """``id;amount`` lines; a line that is not is a dead letter."""
    parts = F.split("value", ";")
    good = F.col("value").rlike(r"^[a-z0-9]+;[0-9.]+$")
    events = raw.where(good).select(parts[0].alias("order_id"), parts[1].cast("double").alias("amount"),
                                    F.col("ingest_time").alias("event_time"), "ingest_time")
    dead = raw.where(~good).select(F.col("value").alias("payload"), F.lit("not id;amount").alias("reason"))
    return Decoded(events, dead)


def big_orders(events, params):
    return {"big": events.where("amount > 10").select("order_id", "amount")}


USER_JOB = Job(name="semicolons", summary="a user's job with its own decoder", schema=ORDER, pipeline=big_orders,
               outputs={"big": Output("big", "orders over 10", (APPEND,), APPEND, False, ("order_id",))},
               default_outputs=("big",), decoder=semicolon_lines)


def test_a_users_job_with_its_own_decoder_is_tapped_through_that_decoder(spark, tmp_path):
    files = ["a1;5\na2;12.5\nnot an order\n", "b1;30\nb2;10\n"]
    land(tmp_path / "landing", files)
    settings = RunSettings(job="semicolons", source=f"files:{tmp_path / 'landing'}?format=text&max_files_per_trigger=1",
                           trigger="available-now", state_dir=str(tmp_path / "state"), sinks={"big": "memory:tap_big"})
    seen = tapped(spark, settings, USER_JOB)
    for batch_id, text in enumerate(files):
        want = {(m[1], float(m[2])) for m in re.finditer(r"^([a-z0-9]+);([0-9.]+)$", text, re.M) if float(m[2]) > 10}
        assert set(seen[batch_id]["big"].rows) == want


COURIER_PING = EventSchema("courier ping", (Field("courier", "string"), Field("latitude", "double"),
                                            Field("longitude", "double"), Field("t", "timestamp")), time_field="t")

COURIERS = Job(name="couriers", summary="a user's job whose map shows its couriers", schema=COURIER_PING,
               pipeline=lambda events, params: {"pings": events.drop("ingest_time", "offset")},
               outputs={"pings": Output("pings", "every ping", (APPEND,), APPEND, False, ("courier", "t"))},
               positions=Positions("courier", lat="latitude", lon="longitude"))


def test_the_map_shows_the_entities_a_users_job_declares(spark, tmp_path):
    def ping(courier, at, lat):
        return f'{{"courier": "{courier}", "latitude": {lat}, "longitude": 2.35, "t": "2026-11-22T09:59:{at:02d}Z"}}\n'

    land(tmp_path / "landing", [ping("c1", 1, 48.1) + ping("c2", 2, 48.2), ping("c1", 3, 48.3)])
    settings = RunSettings(job="couriers", source=f"files:{tmp_path / 'landing'}?max_files_per_trigger=1",
                           trigger="available-now", state_dir=str(tmp_path / "state"), sinks={"pings": "memory:tap_pings"})
    feed = ResultsFeed()
    pools = []  # the fair-scheduler pool the tap's Spark jobs are submitted in
    original = feed.set_positions
    feed.set_positions = lambda *a: (pools.append(spark.sparkContext.getLocalProperty("spark.scheduler.pool")),
                                     original(*a))
    tapped(spark, settings, COURIERS, feed)
    positions = {p["courier"]: (p["lat"], p["lon"]) for p in feed.snapshot()["positions"]}
    assert positions == {"c1": (48.3, 2.35), "c2": (48.2, 2.35)}
    # last in line for the cores, behind the outputs' queries; the thread that started it keeps its own pool
    assert pools and set(pools) == {"dashboard"}
    assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") != "dashboard"
