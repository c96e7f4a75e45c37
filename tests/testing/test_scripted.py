"""ScriptedStream: step by step, what the fleet windows emit, the watermark, late events, dead letters."""

from __future__ import annotations

from datetime import timezone

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.testing import ScriptedStream
from tests.testing.events import INGEST, at, ping


def test_each_step_shows_its_windows_watermark_late_events_and_dead_letters(spark):
    with ScriptedStream(spark, "fleet", "windows", ingest_time=INGEST, watermark="5s") as stream:
        first = stream.step([ping("a", 0), ping("b", 20)])
        second = stream.step([ping("c", 15), ping("d", 14), ping("e", 30), "{oops"])
        third = stream.step([ping("f", 24)])
        fourth = stream.step([ping("h", 100)])

    # the step's batch and the no-data batch that moved the watermark to 20 s - 5 s and closed [0,10)
    assert len(first.batch_ids) == 2 and first.watermark_before is None
    assert [(r.window_start, r.events) for r in first.emitted] == [(at(0), 1)]
    assert first.watermark == at(15).replace(tzinfo=timezone.utc)
    assert (first.late, first.dropped, first.dead_letters) == ([], 0, [])

    # c (15 s, at the watermark) and d (14 s) are late and dropped; [10,20) gets nothing
    assert [r.event_id for r in second.late] == ["c", "d"] and second.dropped == 2
    assert second.emitted == [] and second.watermark == at(25).replace(tzinfo=timezone.utc)
    assert [(r.payload, r.reason[:14]) for r in second.dead_letters] == [("{oops", "malformed JSON")]

    # the watermark does not move, so no no-data batch runs
    assert (len(third.batch_ids), [r.event_id for r in third.late], third.dropped) == (1, ["f"], 1)

    # 100 s moves the watermark to 95 s: b's [20,30) and e's [30,40) close
    assert [(r.window_start, r.events) for r in fourth.emitted] == [(at(20), 1), (at(30), 1)]
    assert str(fourth).startswith(f"step 3 (batches {fourth.batch_ids[0]}, {fourth.batch_ids[1]}): 2 row(s) emitted")


def test_a_step_outside_the_with_block_is_refused():
    stream = ScriptedStream(None, "fleet", "windows")
    with pytest.raises(ConfigError, match="not running"):
        stream.step([ping("a", 0)])
