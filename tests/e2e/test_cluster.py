"""The fleet job on a Spark standalone cluster whose workers have nothing of speedlayer installed.

Every run is the CLI with ``--master spark://...``: speedlayer packs itself and its Python packages,
the executors unpack them, and the sources, the sinks and the state processors run there. Files
into Parquet are checked row for row against the same run in local mode (in the test's own local
session, which needs no second driver); Redis into every database sink, with a worker lost mid-run,
against the plain-Python oracle (``test_lost_worker``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.e2e.checks import raw_entries
from tests.e2e.killing import CliProcess, our_tracebacks

# one test process runs every test of the session's standalone cluster (it starts once per process)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RUN_S = 600


def run_ok(args: list[str], workdir: Path, name: str) -> str:
    process = CliProcess(args, workdir, workdir / f"{name}.log")
    assert process.wait(RUN_S) == 0, process.tail()
    output = process.output()
    assert not our_tracebacks(output), output[-3000:]
    return output


#: payloads landed as files: the stream's oldest half, some 50 s of event time (about 500 windows, several incidents)
LANDED = 10_000


def land(stream: str, landing: Path, files: int = 4) -> None:
    """The stream's LANDED oldest payloads as ``files`` JSON-lines files, oldest first."""
    payloads = [payload for _, payload, _ in sorted(raw_entries(stream), key=lambda e: (e[2], e[0]))][:LANDED]
    landing.mkdir(parents=True)
    now = time.time()  # ingest time: the events lie some minutes before it
    per_file = -(-len(payloads) // files)
    for n in range(files):
        path = landing / f"part-{n}.json"
        path.write_text("\n".join(payloads[n * per_file:(n + 1) * per_file]) + "\n")
        os.utime(path, (now + n, now + n))


#: windows (a JVM state store), and incidents: a transformWithStateInPandas processor on the executors
OUTPUTS = ("windows", "incidents")


def test_files_to_parquet_on_a_cluster_equals_local_mode(spark, cluster, cluster_env, stream, tmp_path):
    """The CLI on the cluster; in local mode the same settings run in this process's local[2] session."""
    landing = tmp_path / "landing"
    land(stream, landing)
    sinks = {where: {name: f"parquet:{tmp_path / where / name}" for name in OUTPUTS} for where in ("cluster", "local")}
    run_ok(["run", "fleet", "--source", f"files://{landing}",
            *(a for name, uri in sinks["cluster"].items() for a in ("--sink", f"{name}={uri}")), "--trigger", "available-now",
            "--incident-after", "2s", "--state-dir", str(tmp_path / "state-cluster"), "--master", cluster.url,
            "--spark-ui", "off", "--no-live"],
           tmp_path, "cluster")
    local = RunSettings(job="fleet", source=f"files://{landing}", sinks=sinks["local"], trigger="available-now",
                        incident_after="2s", state_dir=str(tmp_path / "state-local"), spark_ui="off")
    assert Run(spark, plan_run(local)).start_and_wait().stopped_by == "end of input"
    results = {where: {name: spark.read.parquet(str(tmp_path / where / name)) for name in OUTPUTS}
               for where in ("cluster", "local")}
    for name in OUTPUTS:
        assert results["local"][name].count() > (100 if name != "incidents" else 0), name
        assertDataFrameEqual(results["cluster"][name], results["local"][name])


def test_a_state_dir_that_only_the_driver_sees_is_refused_before_start(cluster, cluster_env, tmp_path):
    """The driver runs in a mount namespace of its own where the state dir is a private tmpfs: the
    executors see the (empty) directory under it, as another machine sees its own local disk."""
    private = tmp_path / "private"
    private.mkdir()
    mount_then_run = f'mount -t tmpfs speedlayer-private "{private}" && exec "$@"'
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount_then_run, "sh",
               sys.executable, "-m", "speedlayer", "run", "fleet", "--source", "generator://?rate=100",
               "--sink", "windows=memory:refused_windows", "--max-events", "100", "--state-dir", str(private / "state"),
               "--master", cluster.url, "--spark-ui", "off", "--no-live"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_S, env={**os.environ, "COLUMNS": "300"})
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "error: an executor on " in error[0], result.stderr[-3000:]
    assert f" cannot see: --state-dir {private / 'state'}; " in error[0] and "shared storage" in error[0]
    assert not list(private.iterdir()), "the driver's private directory leaked to the executors' view"


def test_a_kafka_source_is_read_by_executors_that_got_the_connector_from_the_run(cluster, cluster_env, kafka, tmp_path):
    """Nothing on the workers holds Spark's Kafka connector: the run adds it (``spark.jars.packages``) and
    Spark hands it to the executors, which read the topic; the alerts are written exactly once."""
    from datetime import datetime, timezone

    from tests import oracle

    source, alerts = kafka.create(prefix="fastcars"), kafka.create(prefix="alerts")
    payloads = [{"event_id": f"e{i}", "vehicle_id": f"V{i % 5}", "event_time": "2026-11-01T10:00:00Z",
                 "speed_kmh": 20.0 + i, "lat": 52.52, "lon": 13.40} for i in range(200)]
    kafka.produce(source, [(p["vehicle_id"], json.dumps(p)) for p in payloads])
    output = run_ok(["run", "fleet", "--source", f"kafka://{kafka.bootstrap}/{source}?startingOffsets=earliest",
                     "--sink", f"alerts=kafka://{kafka.bootstrap}/{alerts}", "--trigger", "available-now",
                     "--state-dir", str(tmp_path / "state"), "--master", cluster.url, "--spark-ui", "off", "--no-live"],
                    tmp_path, "kafka")
    assert "adding org.apache.spark:spark-sql-kafka-0-10_2.13:" in output
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    expected = oracle.alerts([oracle.parse(json.dumps(p), now) for p in payloads])
    assert expected and sorted(r.key for r in kafka.read(alerts)) == sorted(expected)
