"""app-actions' ``late`` output on a stream: the rows a plain-Python oracle expects, and the books balance.

The oracle below is written from the documented rule, not from the pipeline: in micro-batch k
Spark drops the events at or before the watermark of batch k-1, which is the newest event time of
the batches before k-1 minus the delay (none before two batches have run). Late copies of one
``id`` in one batch share a row, the lowest offset's (the earliest line of the file), with their
count; the window reported is the ``--slide`` step the action fell in. Each file is one micro-batch
(``max_files_per_trigger=1``), read by the counts query and the late query alike.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from speedlayer.runtime.build import build_output
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import land_files

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)
WATERMARK, SLIDE, SLIDING_WINDOW = timedelta(seconds=5), timedelta(seconds=10), timedelta(seconds=20)
ACTIONS = ("open", "view", "click", "search", "add_to_cart", "purchase", "share", "close")  # README


def act(aid, sec, action):
    return json.dumps({"id": aid, "time": (T0 + timedelta(seconds=sec)).isoformat().replace("+00:00", "Z"),
                       "action": action})


FILES = [
    [act("a", 0, "open"), act("b", 20, "view"), act("b", 20, "view")],            # b re-sent: a duplicate
    [act("c", 30, "click"), act("d", 8, "view"), act("e", 40, "search"), "{oops"],  # d behind 15 s, yet counted
    [act("f", 12, "click"), act("f", 12, "view"), act("g", 50, "share"),            # f: two differing late copies
     act("h", 33, "open"), act("a", 0, "open")],                                    # a re-sent, late
    [act("i", 60, "view"), act("j", 44, "click"), act("k", 35, "purchase")],        # k exactly at the watermark
    [act("l", 30, "add_to_cart"), act("m", 46, "close"), act("n", 47, "teleport")],  # l late, n a dead letter
]


def parse(line):
    """(id, naive UTC time, action) of a valid action, else None."""
    try:
        event = json.loads(line)
        when = datetime.fromisoformat(event["time"].replace("Z", "+00:00")).astimezone(timezone.utc)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(event.get("id"), str) or not event["id"].strip() or event.get("action") not in ACTIONS:
        return None
    return event["id"], when.replace(tzinfo=None), event["action"]


def oracle(files):
    """The late rows: (id, time, action, window_start, window_end, missed_watermark, copies)."""
    newest, rows = [], []
    for k, lines in enumerate(files):
        seen = [t for t in newest[:max(k - 1, 0)] if t is not None]
        bound = max(seen) - WATERMARK if seen else None
        events = [e for e in map(parse, lines) if e is not None]
        late = {}
        for event in events:  # file order is offset order: the first copy is the lowest offset
            if bound is not None and event[1] <= bound:
                first, copies = late.get(event[0], (event, 0))
                late[event[0]] = (first, copies + 1)
        for (aid, when, action), copies in late.values():
            start = datetime(1970, 1, 1) + (when - datetime(1970, 1, 1)) // SLIDE * SLIDE
            rows.append((aid, when, action, start, start + SLIDE, bound, copies))
        newest.append(max((e[1] for e in events), default=None))
    return sorted(rows)


def test_late_actions_are_what_the_oracle_says_and_the_books_balance(spark, tmp_path):
    landing = tmp_path / "landing"
    land_files(landing, FILES, T0 + timedelta(seconds=100))
    s = RunSettings(job="app-actions", source=f"files://{landing}?max_files_per_trigger=1", trigger="available-now",
                    watermark="5s", sliding_window="20s", slide="10s",
                    sinks={"counts": "memory:acts_counts", "late": "memory:acts_late"}, output_mode={"counts": "complete"},
                    state_dir=str(tmp_path / "st"))
    plan = plan_run(s)
    progress = {}
    for name, mode in (("counts", "complete"), ("late", "append")):
        query = (build_output(spark, plan, name).writeStream.format("memory").queryName(f"acts_{name}")
                 .outputMode(mode).option("checkpointLocation", str(tmp_path / "st" / name)).trigger(availableNow=True)
                 .start())
        query.awaitTermination()
        progress[name] = query.recentProgress

    late = spark.table("acts_late")
    assert late.columns == ["id", "time", "action", "window_start", "window_end", "missed_watermark", "copies"]
    expected = oracle(FILES)
    assert [r[0] for r in expected] == ["a", "f", "k", "l"]  # the oracle sees what the comments say
    assert sorted(tuple(r) for r in late.collect()) == expected

    operators = [op for p in progress["counts"] for op in p["stateOperators"]]
    dropped_by_spark = sum(op["numRowsDroppedByWatermark"] for op in operators)
    duplicates = sum(op["customMetrics"].get("numDroppedDuplicateRows", 0) for op in operators)
    # every action lies in exactly SLIDING_WINDOW / SLIDE windows; complete mode shows the open ones too
    accepted = spark.table("acts_counts").agg({"actions": "sum"}).first()[0] // (SLIDING_WINDOW // SLIDE)
    late_events = sum(r.copies for r in late.collect())
    malformed = build_output(spark, plan, "dead-letters", batch=True).count()
    assert (accepted, late_events, malformed, duplicates) == (10, 5, 2, 1)
    assert sum(len(lines) for lines in FILES) == accepted + late_events + malformed + duplicates
    assert late_events == dropped_by_spark
