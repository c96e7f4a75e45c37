"""The job's shared query (``--one-query``): every output's rows as each output run in a query of its own.

Two runs of the fleet job over the same landed files (one file per micro-batch, events written in
plain Python by ``tests.e2e.fleet_input``, plus one event far behind the watermark): one writes
six outputs from one shared query, the other from a query per output. Their PostgreSQL tables
must hold the same rows, and the alerts, dead letters and late events must be what the plain
oracle says.
"""

from __future__ import annotations

import dataclasses
import json

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import functions as F

import speedlayer
from speedlayer import APPEND, Output
from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run_state import prepare_state
from speedlayer.runtime.settings import RunSettings
from speedlayer.runtime.shared import OUTPUTS_FILE, SHARED_CHECKPOINT
from tests import oracle
from tests.e2e.fleet_input import INGEST, T0, event_files, expected_alerts, ingest_of
from tests.helpers import land_files
from tests.runtime.shop import SHOP, order_lines

pytestmark = pytest.mark.timeout(600)

OUTPUTS = ("windows", "alerts", "dead-letters", "late", "incidents", "trips")
#: an event far behind the watermark when its file is read: the late output's, nobody else's
LATE_EVENT = json.dumps({"event_id": "late-1", "vehicle_id": "V01", "event_time": T0.isoformat().replace("+00:00", "Z"),
                         "speed_kmh": 5.0, "lat": 52.5, "lon": 13.4})


def landed(tmp_path):
    files = event_files(3, 150)
    files[2].append(LATE_EVENT)
    land_files(tmp_path / "landing", files, INGEST)
    return files


def run_fleet(spark, tmp_path, url: str, prefix: str, one_query: bool):
    sinks = {o: f"{url}?table={prefix}_{o.replace('-', '_')}" for o in OUTPUTS}
    with speedlayer.run("fleet", source=f"files://{tmp_path / 'landing'}?max_files_per_trigger=1", spark=spark,
                        trigger="available-now", sinks=sinks, one_query=one_query,
                        state_dir=str(tmp_path / f"state-{prefix}")) as handle:
        names = [q.name for q in handle.queries]
        summary = handle.wait()
    return names, summary


def table(url: str, name: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        columns = [r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                                              "ORDER BY column_name", (name,))]
        rows = conn.execute(sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(name))).fetchall()
    return sorted(rows, key=repr)


def test_one_query_writes_what_a_query_per_output_writes(spark, postgres_url, tmp_path):
    files = landed(tmp_path)

    shared_names, summary = run_fleet(spark, tmp_path, postgres_url, "one", one_query=True)
    alone_names, _ = run_fleet(spark, tmp_path, postgres_url, "alone", one_query=False)

    assert shared_names == ["fleet_shared"]  # every output in one query, which read each file in one batch
    assert {q.output: q.batches for q in summary.queries} == dict.fromkeys(OUTPUTS, summary.queries[0].batches)
    assert len(alone_names) == len(OUTPUTS)
    for output in OUTPUTS:
        name = output.replace("-", "_")
        assert table(postgres_url, f"one_{name}") == table(postgres_url, f"alone_{name}"), output
    pings = [oracle.parse(line, ingest_of(i)) for i, lines in enumerate(files) for line in lines]
    with psycopg.connect(postgres_url) as conn:
        alerts = dict(conn.execute("SELECT event_id, excess_kmh FROM one_alerts").fetchall())
        dead_letters = conn.execute("SELECT count(*) FROM one_dead_letters").fetchone()[0]
        late = [r[0] for r in conn.execute("SELECT event_id FROM one_late").fetchall()]
        windows = conn.execute("SELECT count(*) FROM one_windows").fetchone()[0]
    assert alerts == pytest.approx(expected_alerts(files))
    assert dead_letters == sum(p is None for p in pings)
    assert late == ["late-1"]
    assert windows > 0


def settings(tmp_path, outputs: tuple[str, ...], one_query: bool = True) -> RunSettings:
    return RunSettings(job="fleet", source="generator://?rows_per_batch=100", state_dir=str(tmp_path / "state"),
                       sinks=dict.fromkeys(outputs, "console:"), one_query=one_query)


def test_outputs_that_cannot_share_keep_their_own_queries(tmp_path):
    plan = plan_run(RunSettings(job="fleet", state_dir=str(tmp_path), one_query=True,
                                sinks={"windows": "console:", "alerts": "console:", "sliding": f"parquet:{tmp_path}/s",
                                       "congestion": "console:"}))
    assert {q.output.name: q.name for q in plan.queries} == {
        "windows": "fleet_shared", "alerts": "fleet_shared", "sliding": "fleet_sliding", "congestion": "fleet_congestion"}
    assert "--one-query: windows, alerts share one query, fleet_shared" in plan.notes
    assert ("--one-query: sliding, congestion keep queries of their own (sliding: sink parquet: starts a query of "
            "its own; congestion: update mode)") in plan.notes


def test_a_single_output_that_can_share_still_joins(tmp_path):
    plan = plan_run(RunSettings(job="fleet", state_dir=str(tmp_path), one_query=True,
                                sinks={"windows": "console:", "sliding": f"parquet:{tmp_path}/s"}))
    assert {q.output.name: q.name for q in plan.queries} == {"windows": "fleet_shared", "sliding": "fleet_sliding"}
    assert "--one-query: sliding keeps a query of its own (sliding: sink parquet: starts a query of its own)" in plan.notes


def test_a_resume_that_changes_the_shared_outputs_is_refused(tmp_path):
    prepare_state(plan_run(settings(tmp_path, ("windows", "alerts"))))
    checkpoint = tmp_path / "state" / "checkpoints" / SHARED_CHECKPOINT
    assert json.loads((checkpoint / OUTPUTS_FILE).read_text()) == ["alerts", "windows"]
    (checkpoint / "offsets").mkdir()  # as after its first batch

    with pytest.raises(ConfigError, match=r"wrote outputs alerts, windows; this run would share alerts, dead-letters, "
                                          r"windows: select the same outputs"):
        prepare_state(plan_run(settings(tmp_path, ("windows", "alerts", "dead-letters"))))
    with pytest.raises(ConfigError, match=r"this run would share none: select the same outputs with --one-query"):
        prepare_state(plan_run(settings(tmp_path, ("windows", "alerts"), one_query=False)))
    with pytest.raises(ConfigError, match=r"this run would share windows: select the same outputs"):
        prepare_state(plan_run(settings(tmp_path, ("windows",))))
    prepare_state(plan_run(settings(tmp_path, ("alerts", "windows"))))  # the same outputs, in any order


def test_an_output_with_a_checkpoint_of_its_own_cannot_join(tmp_path):
    (tmp_path / "state" / "checkpoints" / "alerts" / "offsets").mkdir(parents=True)
    with pytest.raises(ConfigError, match="output 'alerts' was written by a query of its own .*without --one-query"):
        prepare_state(plan_run(settings(tmp_path, ("windows", "alerts"))))


def test_one_query_needs_micro_batches(tmp_path):
    with pytest.raises(ConfigError, match="--one-query runs a micro-batch query"):
        plan_run(RunSettings(job="fleet", trigger="continuous:1s", one_query=True, sinks={"alerts": "console:"}))




def hourly_of_windows(orders, params):
    """An aggregation of an aggregation: Spark runs it only with a watermark per stateful operator."""
    per_window = (orders.withWatermark("order_time", "5 seconds")
                  .groupBy(F.window("order_time", "10 seconds").alias("w")).count())
    hourly = per_window.groupBy(F.window(F.window_time("w"), "1 hour").alias("hour")).agg(F.sum("count").alias("orders"))
    return {"orders": orders.select("order_id", "customer", "amount", "currency", "order_time"),
            "hourly": hourly.select(F.col("hour.start").alias("hour_start"), "orders")}


def test_an_output_that_needs_a_watermark_per_operator_is_refused_before_any_query_starts(spark, tmp_path):
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "o.jsonl").write_text("\n".join(order_lines(5)) + "\n")
    job = dataclasses.replace(SHOP, pipeline=hourly_of_windows, outputs={
        **SHOP.outputs, "hourly": Output("hourly", "orders per hour", (APPEND,), APPEND, True, ("hour_start",))})

    refused = r"output 'hourly' cannot share the job's query: its Aggregate feeds another stateful operation"
    with pytest.raises(ConfigError, match=refused + r".*: run without --one-query"):
        speedlayer.run(job, source=f"files:{tmp_path / 'landing'}?format=json", spark=spark, trigger="available-now",
                       state_dir=str(tmp_path / "state"), one_query=True,
                       sinks={"orders": "console:", "hourly": "console:"})
    assert spark.streams.active == []
    assert not (tmp_path / "state" / "checkpoints" / SHARED_CHECKPOINT / "offsets").exists()


def test_a_landing_directory_cleaned_after_reading_feeds_the_shared_query(tmp_path):
    """The shared query reads the directory once: removing a file once it is read harms no other output."""
    source = f"files://{tmp_path}?clean_source=delete"
    plan = plan_run(RunSettings(job="fleet", source=source, one_query=True,
                                sinks={"windows": "console:", "alerts": "console:"}))
    assert {q.name for q in plan.queries} == {"fleet_shared"}
    with pytest.raises(ConfigError, match="clean_source=delete with 2 outputs"):
        plan_run(RunSettings(job="fleet", source=source, sinks={"windows": "console:", "alerts": "console:"}))
