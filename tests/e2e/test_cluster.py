"""The fleet job on a Spark standalone cluster whose workers have nothing of speedlayer installed.

Every run is the CLI with ``--master spark://...``: speedlayer packs itself and its Python packages,
the executors unpack them, and the sources, the sinks and the state processors run there. Kafka
(Spark's connector, added by the run) into Parquet is checked row for row against the same run in
local mode (in the test's own local session, which needs no second driver), and its alerts into
Kafka against the plain-Python oracle; Redis into every database sink, with a worker lost mid-run,
against the oracle too (``test_lost_worker``).
"""

from __future__ import annotations

import os
import subprocess
import sys
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


#: payloads of the cluster run: the stream's oldest half, some 50 s of event time (about 500 windows, several
#: incidents, some 600 alerts)
PAYLOADS = 10_000
#: compared with local mode row for row: windows (a JVM state store) and incidents (a
#: transformWithStateInPandas processor on the executors)
COMPARED = ("windows", "incidents")


def test_kafka_into_parquet_on_a_cluster_equals_local_mode_and_its_alerts_the_oracle(spark, cluster, cluster_env, stream,
                                                                                      kafka, tmp_path):
    """Nothing on the workers holds Spark's Kafka connector: the run adds it (``spark.jars.packages``) and
    Spark hands it to the executors, which read the topic. Windows and incidents into Parquet equal the
    same settings run in this process's local[2] session, row for row; the alerts, into a Kafka topic,
    are the oracle's, each once."""
    from tests import oracle

    payloads = [payload for _, payload, _ in sorted(raw_entries(stream), key=lambda e: (e[2], e[0]))][:PAYLOADS]
    source, alerts = kafka.create(prefix="fleet"), kafka.create(prefix="alerts")
    kafka.produce(source, [(None, payload) for payload in payloads])
    uri = f"kafka://{kafka.bootstrap}/{source}?startingOffsets=earliest"
    sinks = {where: {name: f"parquet:{tmp_path / where / name}" for name in COMPARED} for where in ("cluster", "local")}
    output = run_ok(["run", "fleet", "--source", uri,
                     *(a for name, sink in sinks["cluster"].items() for a in ("--sink", f"{name}={sink}")),
                     "--sink", f"alerts=kafka://{kafka.bootstrap}/{alerts}", "--trigger", "available-now",
                     "--incident-after", "2s", "--state-dir", str(tmp_path / "state-cluster"), "--master", cluster.url,
                     "--spark-ui", "off", "--no-live"],
                    tmp_path, "cluster")
    assert "adding org.apache.spark:spark-sql-kafka-0-10_2.13:" in output

    local = RunSettings(job="fleet", source=uri, sinks=sinks["local"], trigger="available-now", incident_after="2s",
                        state_dir=str(tmp_path / "state-local"), spark_ui="off")
    assert Run(spark, plan_run(local)).start_and_wait().stopped_by == "end of input"
    for name in COMPARED:
        got, want = (spark.read.parquet(str(tmp_path / where / name)) for where in ("cluster", "local"))
        assert want.count() > (100 if name != "incidents" else 0), name
        assertDataFrameEqual(got, want)

    expected = oracle.alerts(oracle.kafka_pings(kafka.read(source)))
    assert len(expected) > 100 and sorted(r.key for r in kafka.read(alerts)) == sorted(expected)


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
