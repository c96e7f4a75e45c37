"""A run survives a machine too busy to start a Python worker in time: the query restarts from its checkpoint.

Spark gives a Python source's planner a fixed 10 s to connect back to the JVM; on a saturated machine
it fails the query with "Python worker failed to connect back". Here the interpreter Spark starts is a
wrapper that holds the first planner 12 s (a marker file shows it did), and the run must still write
exactly what plain Python computes from the orders.
"""

import dataclasses
import logging
import os
import sys
import time

import psycopg
import pytest
import redis
from pyspark.sql import functions as F

import speedlayer
from speedlayer.runtime.run import RESTARTS
from speedlayer.runtime.shared import SHARED_CHECKPOINT
from tests.runtime.shop import SHOP, expected, order_lines, valid_order

SLOW_PLANNER = """#!/bin/sh
case "$*" in *python_streaming_source_runner*)
  if [ ! -e {marker} ]; then date +%s.%N > {marker}; sleep 12; fi;;
esac
exec {python} "$@"
"""


def test_a_planner_too_slow_to_connect_back_restarts_its_query_and_loses_nothing(
        spark, redis_url, tmp_path, monkeypatch, caplog):
    url, prefix = redis_url
    lines = order_lines()
    client = redis.Redis.from_url(url)
    for line in lines:
        client.xadd(f"{prefix}:orders", {"value": line})
    client.close()
    orders, totals, malformed = expected(lines)
    marker, wrapper = tmp_path / "held", tmp_path / "slow-python"
    wrapper.write_text(SLOW_PLANNER.format(marker=marker, python=sys.executable))
    wrapper.chmod(0o755)
    # Spark starts a source's planner with the interpreter the source was registered with
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(wrapper))

    started = time.time()
    with caplog.at_level(logging.WARNING, logger="speedlayer.run"):
        summary = speedlayer.run(SHOP, source=f"{url}?stream={prefix}:orders", trigger="available-now", spark=spark,
                                 state_dir=str(tmp_path / "state"), sinks={
                                     "orders": f"parquet:{tmp_path / 'orders'}", "totals": "memory:busy_totals",
                                     "dead-letters": f"parquet:{tmp_path / 'dead'}"}).wait()

    held_at = float(marker.read_text())
    assert started < held_at < started + 60  # the planner really was held, during this run
    restarts = [r.getMessage() for r in caplog.records if "restarting it from its checkpoint" in r.getMessage()]
    assert len(restarts) == 1, restarts
    assert restarts[0].endswith(f"failed: the machine is too busy to start a Python worker in time; restarting it "
                                f"from its checkpoint (1/{RESTARTS})")
    assert summary.stopped_by == "end of input"
    written = spark.read.parquet(str(tmp_path / "orders")).collect()
    assert sorted(r.order_id for r in written) == sorted(o["order_id"] for o in orders)
    assert {(r.customer, r.currency): (r.orders, round(r.amount, 6)) for r in spark.table("busy_totals").collect()} == \
        {k: (n, round(a, 6)) for k, (n, a) in totals.items()}
    assert sorted(r.payload for r in spark.read.parquet(str(tmp_path / "dead")).collect()) == sorted(malformed)


BROKEN_JOB = '''
from pyspark.sql import functions as F
from tests.runtime.shop import SHOP
import dataclasses

def totals(orders, params):
    return {"totals": orders.groupBy("customr").agg(F.count("*").alias("orders"))}  # a typo: customer

BROKEN = dataclasses.replace(SHOP, name="broken", pipeline=totals, outputs={"totals": SHOP.outputs["totals"]},
                             default_outputs=("totals",))
'''


def test_a_pipeline_asking_for_a_column_its_events_lack_is_one_line_naming_output_and_function(
        spark, capfd, tmp_path, monkeypatch):
    from speedlayer.cli.app import main

    (tmp_path / "broken_job.py").write_text(BROKEN_JOB)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "orders.jsonl").write_text("\n".join(order_lines(4)) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "broken_job:BROKEN", "--source", f"files:{tmp_path / 'landing'}?format=json", "--trigger",
              "available-now", "--state-dir", str(tmp_path / "state"), "--no-live", "--master", "local[2]"])
    err = capfd.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and "{" not in err  # no JSON log record with the plan and the JVM's stack
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith("error: output 'totals' of job 'broken': [UNRESOLVED_COLUMN"), errors
    assert "`customr`" in errors[0] and errors[0].endswith("fix the job's pipeline (broken_job.totals)")


def _fails_once_in_the_second_batch(marker: str, commits: str):
    """A column function whose first sight of order o030 (the second file's first) fails the query as a
    machine too busy would; the marker records which batches were committed at that moment."""
    @F.udf("string")
    def order_id(value):
        if value == "o030" and not os.path.exists(marker):
            committed = sorted(int(n) for n in os.listdir(commits) if n.isdigit()) if os.path.isdir(commits) else []
            with open(marker, "w") as out:
                out.write(",".join(map(str, committed)))
            raise RuntimeError("Python worker failed to connect back (a stand-in for a busy machine)")
        return value

    return order_id


@pytest.mark.parametrize("one_query", [False, True], ids=["own-query", "shared-query"])
def test_a_restart_after_a_committed_batch_resumes_into_the_rows_it_wrote(spark, postgres_url, tmp_path, one_query):
    """The table already holds batch 0's rows when the query restarts: they are this run's, not another's.
    In the job's shared query (--one-query) the orders and the dead letters restart together."""
    lines = order_lines()
    landing, state, marker = tmp_path / "landing", tmp_path / "state", tmp_path / "failed-at"
    landing.mkdir()
    for i, part in enumerate((lines[:30], lines[30:])):
        path = landing / f"part-{i}.jsonl"
        path.write_text("\n".join(part) + "\n")
        os.utime(path, (time.time() - 10 + i,) * 2)  # ingest time (a file's mtime) after every order, in this order
    checkpoint = state / "checkpoints" / (SHARED_CHECKPOINT if one_query else "orders")
    fail = _fails_once_in_the_second_batch(str(marker), str(checkpoint / "commits"))
    job = dataclasses.replace(SHOP, pipeline=lambda orders, params: {
        "orders": orders.select(fail("order_id").alias("order_id"), "customer", "amount", "currency", "order_time")})
    sinks = {"orders": f"{postgres_url}?table=orders"}
    if one_query:
        sinks["dead-letters"] = f"{postgres_url}?table=dead_letters"

    summary = speedlayer.run(job, source=f"files:{landing}?format=json&max_files_per_trigger=1", spark=spark,
                             trigger="available-now", state_dir=str(state), sinks=sinks, one_query=one_query).wait()

    assert marker.read_text() == "0"  # it failed in batch 1, with batch 0 committed and its rows in the table
    assert summary.stopped_by == "end of input"
    assert {q.name for q in summary.queries} == {"shop_shared" if one_query else "shop_orders"}
    with psycopg.connect(postgres_url) as conn:
        written = sorted(r[0] for r in conn.execute("SELECT order_id FROM orders"))
        dead = sorted(r[0] for r in conn.execute("SELECT payload FROM dead_letters")) if one_query else []
    assert written == sorted(o["order_id"] for o in map(valid_order, lines) if o)
    assert dead == (sorted(expected(lines)[2]) if one_query else [])
