"""A user's own job, end to end: the example package's ``orders`` job (an entry point of
``acme-speedlayer``, installed into the test venv by ``make test``) on the standalone cluster, and its
job-file twin in local mode.

Each run reads shop orders from a Redis stream (``PER_BATCH`` entries per micro-batch) and writes
big orders, revenue per minute (update mode), dead letters and late orders into PostgreSQL. The
package's run is on a cluster whose workers have neither speedlayer nor the example package
(``--ship auto`` packs both). While a run goes on, the dashboard's ``/api/state`` shows the job's
queries; the package's run (driver, JVM, Python workers) is then SIGKILLed in a batch of ``revenue``
that is planned and not committed, and the same command, restarted, finishes. Every table must then
hold what ``tests.examples.orders`` computes in plain Python: no row missing, none twice.
``speedlayer status`` shows every query's last batch.

The job-file twin runs once, straight through, in the test's own session: what the CLI and a cluster
add (the Redis source and the PostgreSQL sinks on executors that only have what was shipped, a driver
lost while they run) is the same code for both jobs and is proven by the package's run; the twin proves
that the job file, read and planned on the driver, computes the same tables.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e.checks import naive_utc
from tests.e2e.killing import CliProcess, kill_mid_batch, our_tracebacks, postgres_rows, wait_for
from tests.examples.orders import PER_BATCH, expected, order_lines
from tests.servers import free_port

# one test process runs every test of the session's standalone cluster (it starts once per process)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JOB_FILE = ROOT / "examples" / "acme-speedlayer" / "orders.yaml"
OUTPUTS = ("big", "revenue", "dead-letters", "late")
RUN_S = 600


def dashboard_outputs(port: int) -> set[str] | None:
    """The outputs whose queries the dashboard shows as active, None while it does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=5) as response:
            state = json.load(response)
    except OSError:
        return None
    active = {q["output"] for q in state["queries"] if q["active"]}
    return active if state["job"] == "orders" and active else None


def orders_stream(redis_url) -> tuple[str, list[str]]:
    """A Redis source URI of a stream holding the example's order lines, and the lines."""
    import redis

    url, prefix = redis_url
    start = (datetime.now(timezone.utc) - timedelta(minutes=30)).replace(second=0, microsecond=0, tzinfo=None)
    lines = order_lines(start)
    client = redis.Redis.from_url(url)
    for line in lines:
        client.xadd(f"{prefix}:orders", {"value": line})
    client.close()
    return f"{url}?stream={prefix}:orders&max_records_per_trigger={PER_BATCH}", lines


def run_args(job: str, source: str, lines: list[str], postgres_url: str, state: Path, *more: str) -> list[str]:
    return ["run", job, "--source", source, *(a for name in OUTPUTS for a in ("--sink", f"{name}={postgres_url}")),
            "--output-mode", "revenue=update", "--max-events", str(len(lines)), "--state-dir", str(state), "--no-live",
            "--spark-ui", "off", "--conf", "spark.sql.shuffle.partitions=2", *more]


def test_a_users_package_job_on_a_cluster_killed_mid_batch_writes_what_the_oracle_says(
        cluster, cluster_env, redis_url, postgres_url, tmp_path):
    """The package's job on the cluster, SIGKILLed mid-batch and restarted."""
    source, lines = orders_stream(redis_url)
    port, state = free_port(), tmp_path / "state"
    args = run_args("orders", source, lines, postgres_url, state, "--master", cluster.url,
                    "--dashboard", "--dashboard-port", str(port))

    first = CliProcess(args, tmp_path, tmp_path / "first.log")
    shown = wait_for(lambda: dashboard_outputs(port), first, RUN_S, "the dashboard showing the queries")
    kill = kill_mid_batch(first, state, "revenue", 1, RUN_S)
    assert kill is not None and kill.batch >= 2, "the kill landed between batches"  # in flight: the moment claimed
    assert kill.after["revenue"].committed < len(lines) // PER_BATCH, kill.describe()
    final = CliProcess(args, tmp_path, tmp_path / "final.log")
    assert final.wait(RUN_S) == 0, final.tail()
    output = final.output()
    assert f"stopped by --max-events {len(lines)}" in output and not our_tracebacks(output), final.tail()
    assert "ships" in output or "shipping" in output, output[:3000]  # said before start, on a cluster
    assert shown <= set(OUTPUTS) and "revenue" in shown

    check_tables(postgres_url, expected(lines))
    status = CliProcess(["status", "--state-dir", str(state), "--no-operators"], tmp_path, tmp_path / "status.log")
    assert status.wait(120) == 0, status.tail()
    for name in OUTPUTS:
        assert name in status.output(), status.tail()


def test_its_job_file_twin_writes_the_same_tables(spark, redis_url, postgres_url, tmp_path):
    """The job file, read and planned like the package's job, from the same Redis stream into PostgreSQL
    (in this test's session: what the CLI and a cluster add is the package's run's to prove)."""
    import speedlayer

    source, lines = orders_stream(redis_url)
    job_file = shutil.copy(JOB_FILE, tmp_path / "orders.yaml")
    handle = speedlayer.run(None, source=source, sinks=dict.fromkeys(OUTPUTS, postgres_url), spark=spark,
                            job_file=str(job_file), output_mode={"revenue": "update"}, max_events=len(lines),
                            state_dir=str(tmp_path / "state"))
    assert handle.wait().stopped_by == f"--max-events {len(lines)}"
    check_tables(postgres_url, expected(lines))


def check_tables(postgres_url: str, want: dict) -> None:
    big = postgres_rows(postgres_url, "big", ["order_id", "customer", "amount", "currency", "order_time"])
    assert len(big) == len({r[0] for r in big}), "an order written twice"
    assert {r[0]: (r[1], r[2], r[3], naive_utc(r[4])) for r in big} == want["big"] and len(big) > 50
    revenue = postgres_rows(postgres_url, "revenue", ["window_start", "window_end", "currency", "amount", "orders"])
    assert {(naive_utc(s), naive_utc(e), c): (round(a, 6), n) for s, e, c, a, n in revenue} == want["revenue"]
    assert len(revenue) == len(want["revenue"]) > 20
    dead = postgres_rows(postgres_url, "dead_letters", ["payload", "reason"])
    assert sorted(p for p, _ in dead) == want["dead-letters"] and all(reason for _, reason in dead)
    late = postgres_rows(postgres_url, "late", ["order_id", "customer", "amount", "currency", "order_time",
                                                "window_start", "window_end", "missed_watermark", "copies"])
    assert {r[0]: (r[1], r[2], r[3], naive_utc(r[4]), naive_utc(r[5]), naive_utc(r[6])) for r in late} == want["late"]
    assert len(late) == len(want["late"]) == 6
    assert all(naive_utc(r[7]) > naive_utc(r[4]) and r[8] == 1 for r in late), late

