"""A worker lost mid-run: the fleet job goes on with the survivor, and nothing is lost or written twice.

The run reads the shared Redis stream in micro-batches of PER_TRIGGER into PostgreSQL on the
two-worker cluster. ``speedlayer.faults`` holds the first executor task that has written part of
its partition in batch HELD (``mid-write:HELD:once``, a marker names its Python worker); the test
then SIGKILLs that executor's worker with everything below it, as a machine that dies. Spark must
notice the lost executor (its log says so), run the task again on the survivor, and finish the run;
PostgreSQL then holds exactly the oracle's windows.
"""

from __future__ import annotations

import json

import pytest

from speedlayer.faults import DIR_ENV, ENV
from tests.e2e.checks import check_windows, final_watermark, stream_pings
from tests.e2e.conftest import N
from tests.e2e.killing import CliProcess, batch_ids, query_state, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HELD = 2
#: events per micro-batch: four batches of data, few enough to keep the test short
PER_TRIGGER = 5_000


def held_pid(markers) -> int | None:
    """The pid of the Python worker holding at mid-write of batch HELD, from its marker."""
    found = [m for m in markers.glob(f"mid-write-{HELD}-*") if not m.name.endswith(".claimed")] if markers.is_dir() else []
    return int(found[0].name.rsplit("-", 1)[1]) if found else None


def test_a_worker_killed_mid_batch_loses_nothing(cluster, cluster_env, stream, postgres_url, tmp_path, monkeypatch):
    markers, state = tmp_path / "markers", tmp_path / "state"
    monkeypatch.setenv(ENV, f"mid-write:{HELD}:once")
    monkeypatch.setenv(DIR_ENV, str(markers))
    args = ["run", "fleet", "--source", f"{stream}&max_records_per_trigger={PER_TRIGGER}",
            "--sink", f"windows={postgres_url}?table=windows", "--trigger", "processing:0s", "--max-events", str(N),
            "--state-dir", str(state), "--master", cluster.url, "--spark-ui", "off", "--no-live"]
    process = CliProcess(args, tmp_path, tmp_path / "run.log")
    victim = None
    try:
        pid = wait_for(lambda: held_pid(markers), process, 300, f"an executor held at mid-write of batch {HELD}")
        victim = cluster.worker_of(pid)
        assert victim is not None, f"the held Python worker {pid} runs under no worker of the cluster"
        checkpoint = state / "checkpoints" / "windows"
        assert query_state(checkpoint).in_flight == HELD  # planned, partly written, not committed: the moment claimed
        cluster.kill_worker(victim)
        assert not cluster.workers[victim].alive

        assert process.wait(600) == 0, process.tail()
    finally:
        if process.proc.poll() is None:
            process.kill()
        if victim is not None:
            cluster.replace_worker(victim)
    output = process.output()
    assert f"stopped by --max-events {N}" in output and "Traceback" not in output, output[-3000:]
    spark_log = (state / "spark.log").read_text(errors="replace")
    assert "Lost executor" in spark_log or "lost executor" in spark_log.lower(), spark_log[-3000:]
    executors = json.loads((state / "executors.json").read_text())  # what status and the dashboard show
    assert executors["lost_count"] >= 1 and executors["alive"] >= 1, executors
    commits = batch_ids(state / "checkpoints" / "windows" / "commits")
    assert commits == set(range(max(commits) + 1)) and HELD in commits

    check_windows(postgres_url, stream_pings(stream), final_watermark(state, "windows"))
