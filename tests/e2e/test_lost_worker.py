"""Redis into every kind of sink on the cluster, a worker lost mid-run: the fleet job goes on with the
survivor, and nothing is lost or written twice.

The run reads the shared Redis stream in micro-batches of PER_TRIGGER into PostgreSQL (windows),
MariaDB (alerts) and Redis (dead letters as a stream, sliding windows as hashes) on the two-worker
cluster, whose Python has nothing of speedlayer: it runs only what speedlayer ships.
``speedlayer.core.faults`` holds the first executor task that has written part of its partition in batch
HELD (``mid-write:HELD:once``, a marker names its Python worker); the test then SIGKILLs that
executor's worker with everything below it, as a machine that dies. Spark must notice the lost
executor (its log says so), run the task again on the survivor, and finish the run; every sink
then holds exactly the oracle's rows. (When the batch's shuffle cannot be recomputed in place, Spark
aborts the batch's job and the run restarts that query from its checkpoint, saying so: either way
the run goes on.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from speedlayer.core.faults import DIR_ENV, ENV
from speedlayer.runtime.shipping import ALIAS
from tests import oracle
from tests.e2e.checks import (
    check_alerts,
    check_dead_letters,
    check_sliding,
    check_windows,
    final_watermark,
    raw_entries,
    stream_pings,
)
from tests.e2e.conftest import N
from tests.e2e.killing import CliProcess, batch_ids, our_tracebacks, query_state, wait_for

# one test process runs every test of the session's standalone cluster (it starts once per process)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: the batch held and hit: the second, so that the lost worker's tasks read and write state that a
#: committed batch left
HELD = 1
#: events per micro-batch: two batches of data, few enough to keep the test short
PER_TRIGGER = 10_000


def held_pid(markers) -> int | None:
    """The pid of the Python worker holding at mid-write of batch HELD, from its marker."""
    found = [m for m in markers.glob(f"mid-write-{HELD}-*") if not m.name.endswith(".claimed")] if markers.is_dir() else []
    return int(found[0].name.rsplit("-", 1)[1]) if found else None


def shipped_to(cluster) -> list[Path]:
    """The unpacked environments in the workers' application directories (one per executor that ran)."""
    return [p for w in cluster.workers for p in w.work_dir.glob(f"app-*/*/{ALIAS}/speedlayer/__init__.py")]


def test_every_sink_on_a_cluster_loses_nothing_when_a_worker_dies_mid_batch(cluster, cluster_env, stream, postgres_url,
                                                                            mysql_url, redis_url, tmp_path, monkeypatch):
    redis_base, prefix = redis_url
    sinks = {"windows": f"{postgres_url}?table=windows", "alerts": f"{mysql_url}?table=alerts",
             "dead-letters": f"{redis_base}?prefix={prefix}:dl", "sliding": f"{redis_base}?prefix={prefix}:sl"}
    markers, state = tmp_path / "markers", tmp_path / "state"
    monkeypatch.setenv(ENV, f"mid-write:{HELD}:once")
    monkeypatch.setenv(DIR_ENV, str(markers))
    args = ["run", "fleet", "--source", f"{stream}&max_records_per_trigger={PER_TRIGGER}",
            *(a for o, uri in sinks.items() for a in ("--sink", f"{o}={uri}")), "--trigger", "processing:0s",
            "--max-events", str(N), "--state-dir", str(state), "--master", cluster.url, "--spark-ui", "off", "--no-live"]
    process = CliProcess(args, tmp_path, tmp_path / "run.log")
    victim = None
    try:
        pid = wait_for(lambda: held_pid(markers), process, 300, f"an executor held at mid-write of batch {HELD}")
        victim = cluster.worker_of(pid)
        assert victim is not None, f"the held Python worker {pid} runs under no worker of the cluster"
        in_flight = {o: query_state(state / "checkpoints" / o).in_flight for o in sinks}
        # planned, partly written, not committed: the moment claimed (in whichever query's task arrived first)
        assert HELD in in_flight.values(), in_flight
        cluster.kill_worker(victim)
        assert not cluster.workers[victim].alive

        assert process.wait(600) == 0, process.tail()
    finally:
        if process.proc.poll() is None:
            process.kill()
        if victim is not None:
            cluster.replace_worker(victim)
    output = process.output()
    assert f"stopped by --max-events {N}" in output and not our_tracebacks(output), output[-3000:]
    # each restart says why: the lost executor, or (on a loaded machine) a Python worker that started too late
    for restart in [line for line in output.splitlines() if "restarting it from its checkpoint" in line]:
        assert ("an executor was lost while its batch was being written" in restart
                or "too busy to start a Python worker in time" in restart), restart
    assert re.search(r"shipping speedlayer and \d+ Python packages to the executors .* they run python3\.\d+", output)
    assert len(shipped_to(cluster)) >= 1, "no executor unpacked the shipped environment"
    spark_log = (state / "spark.log").read_text(errors="replace")
    assert "Lost executor" in spark_log or "lost executor" in spark_log.lower(), spark_log[-3000:]
    executors = json.loads((state / "executors.json").read_text())  # what status and the dashboard show
    assert executors["lost_count"] >= 1 and executors["alive"] >= 1, executors
    for output_name in sinks:
        commits = batch_ids(state / "checkpoints" / output_name / "commits")
        # no batch skipped; the oldest are purged past --retain-batches (the newest 20 kept by default)
        assert commits == set(range(min(commits), max(commits) + 1)) and min(commits) <= max(0, max(commits) - 19), \
            (output_name, commits)

    pings = stream_pings(stream)
    check_windows(postgres_url, pings, final_watermark(state, "windows"))
    check_alerts(mysql_url, pings)
    refused = [(o, p) for o, p, ingest in raw_entries(stream) if oracle.parse(p, ingest) is None]
    check_dead_letters(f"{prefix}:dl", refused)
    check_sliding(f"{prefix}:sl", pings, final_watermark(state, "sliding"))
