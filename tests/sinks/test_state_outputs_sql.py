"""The fleet job's stateful outputs into real databases: each table equals the static recomputation.

One run writes trips, count windows, congestion (update mode), incidents and ride matches, split
between PostgreSQL and MariaDB, so that each output goes through the SQL sink with its own key.
The dialects themselves (types, upserts, replays) are tested in test_postgres.py and test_mysql.py.
"""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import batch_output
from tests.sinks import test_mysql, test_postgres
from tests.sinks.common import as_frame

# 180 vehicles at 200 events/s with 0.5 s of jitter and a 1 s trip gap: trips split now and then,
# and incidents open after 3 s above the limit, so that 20 s of event time close a few.
SOURCE = ("generator://?seed=5&start=2026-11-22T10:00:00Z&rate=200&vehicles=180&late=0&disorder=500ms"
          "&rows_per_batch=4000")
MAX_EVENTS = 4000
ON_POSTGRES = ("trips", "congestion", "matches")
ON_MYSQL = ("count-windows", "incidents")


def table_of(output: str) -> str:
    return "st_" + output.replace("-", "_")


def test_state_outputs_written_to_postgres_and_mysql_equal_the_static_run(spark, postgres_url, mysql_url, tmp_path):
    sinks = {**{o: f"{postgres_url}?table={table_of(o)}" for o in ON_POSTGRES},
             **{o: f"{mysql_url}?table={table_of(o)}" for o in ON_MYSQL}}
    s = RunSettings(job="fleet", source=SOURCE, max_events=MAX_EVENTS, state_dir=str(tmp_path / "state"),
                    watermark="1s", trip_gap="1s", count_window=3, incident_after="3s", incident_timeout="3s",
                    match_within="2s", match_cell=100, trigger="processing:0s", sinks=sinks, output_mode={"congestion": "update"})
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == f"--max-events {MAX_EVENTS}"
    watermark = F.lit(summary.queries[0].watermark).cast("timestamp")

    def written(output: str):
        # (the static run's memory sink takes append or complete; complete is the final state of an update)
        modes = {output: "complete"} if output == "congestion" else {}
        expected = batch_output(spark, s.model_copy(update={"output_mode": modes}), output)
        reader = test_postgres if output in ON_POSTGRES else test_mysql
        return as_frame(spark, reader.rows(sinks[output].split("?")[0], table_of(output), expected.columns), expected), expected

    trips, expected = written("trips")  # append: a trip once the watermark passes its end plus the gap
    assert trips.count() > 100
    assertDataFrameEqual(trips, expected.where(F.col("trip_end") + F.expr("INTERVAL 1 SECOND") <= watermark), rtol=1e-9)

    count_windows, expected = written("count-windows")
    assert count_windows.count() > 1000
    assertDataFrameEqual(count_windows, expected.where(F.col("window_end") <= watermark), rtol=1e-9)

    congestion, expected = written("congestion")  # update mode upserted by key: the final counts
    assert congestion.count() >= 2
    assertDataFrameEqual(congestion, expected, rtol=1e-9)

    incidents, expected = written("incidents")
    assert incidents.count() >= 3
    assertDataFrameEqual(incidents, expected.where(F.col("closed_at") <= watermark), rtol=1e-9)

    matches, expected = written("matches")
    assert matches.count() > 100
    assertDataFrameEqual(matches, expected, rtol=1e-9)
