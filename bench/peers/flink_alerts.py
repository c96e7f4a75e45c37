"""The fleet alerts on PyFlink (Table API and SQL), Kafka -> Kafka: the third side of bench/kafka_latency.py.

``pyflink_alerts(bootstrap)`` is that bench's starter (it runs in speedlayer's venv): it starts this file
as a job process with the python of PyFlink's own venv (``flink_env.py``), waits until every
task of the job runs, and returns a function that stops it. The job, as a Flink user writes it: a
Kafka source table from the earliest offset (JSON pings), the zone limit as the CASE WHEN of the
other Flink peer (``common.limit_case``, the same zones), the pings above it with
``speed_limit_kmh`` and ``excess_kmh``, into a Kafka sink table keyed by ``event_id`` (raw bytes) with
the fields as JSON. It runs in PyFlink's mini cluster, in the job process, until its stdin closes.

    PYFLINK_PYTHON bench/peers/flink_alerts.py --bootstrap HOST:PORT --source IN --out OUT --jar CONNECTOR_JAR \\
        --ready READY_FILE

Only the standard library at the top: the job process has PyFlink and not speedlayer, the bench the reverse.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from speedlayer.bench.kafka_latency import Starter

#: how long the starter waits for the job's tasks to run
START_TIMEOUT_S = 180.0
#: how long the stop function waits for the job process to cancel the job and exit
STOP_TIMEOUT_S = 60.0

# What the job changes from Flink's defaults, and why:
# - parallelism.default 2: one source reader per input partition.
# - execution.checkpointing.interval 10 s: the at-least-once Kafka sink waits for the broker's acks of its
#   pending records at each checkpoint; without checkpoints nothing is guaranteed.
# Left at Flink's defaults: operator chaining (on), so source, filter and sink are one task per subtask with
# no network exchange, and execution.buffer-timeout (100 ms), which applies to network exchanges only.
SETTINGS = {
    "parallelism.default": "2",
    "execution.checkpointing.interval": "10 s",
}
TERMINAL = ("FAILED", "CANCELED", "FINISHED")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def source_ddl(bootstrap: str, topic: str) -> str:
    return f"""
        CREATE TABLE pings (
            event_id STRING, vehicle_id STRING, event_time TIMESTAMP_LTZ(3), speed_kmh DOUBLE, lat DOUBLE, lon DOUBLE
        ) WITH (
            'connector' = 'kafka', 'topic' = {_quote(topic)}, 'properties.bootstrap.servers' = {_quote(bootstrap)},
            'scan.startup.mode' = 'earliest-offset',
            'format' = 'json', 'json.timestamp-format.standard' = 'ISO-8601'
        )"""


def sink_ddl(bootstrap: str, topic: str) -> str:
    return f"""
        CREATE TABLE alerts (
            event_id STRING, vehicle_id STRING, event_time TIMESTAMP_LTZ(3), speed_kmh DOUBLE, lat DOUBLE, lon DOUBLE,
            speed_limit_kmh DOUBLE, excess_kmh DOUBLE
        ) WITH (
            'connector' = 'kafka', 'topic' = {_quote(topic)}, 'properties.bootstrap.servers' = {_quote(bootstrap)},
            'key.format' = 'raw', 'key.fields' = 'event_id',
            'value.format' = 'json', 'value.json.timestamp-format.standard' = 'ISO-8601',
            'sink.delivery-guarantee' = 'at-least-once'
        )"""


def alerts_sql() -> str:
    from common import limit_case  # beside this file: the job process runs it as a script

    return f"""
        INSERT INTO alerts
        SELECT event_id, vehicle_id, event_time, speed_kmh, lat, lon, speed_limit_kmh,
               ROUND(speed_kmh - speed_limit_kmh, 1) AS excess_kmh
        FROM (SELECT *, {limit_case()} AS speed_limit_kmh FROM pings)
        WHERE speed_kmh > speed_limit_kmh"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tasks_running(rest_port: int, job_id: str) -> bool:
    """Whether every vertex of the job runs (all its subtasks deployed and started), by Flink's REST API."""
    loopback = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with loopback.open(f"http://127.0.0.1:{rest_port}/jobs/{job_id}", timeout=5) as response:
            vertices = json.load(response)["vertices"]
    except OSError:
        return False
    return bool(vertices) and all(v["status"] == "RUNNING" for v in vertices)


def run_job(args: argparse.Namespace) -> int:
    """Submit the job, write its id to the ready file once its tasks run, cancel it when stdin closes."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    rest_port = _free_port()
    tenv = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    for key, value in {**SETTINGS, "pipeline.jars": args.jar.resolve().as_uri(), "rest.bind-port": str(rest_port)}.items():
        tenv.get_config().set(key, value)
    tenv.execute_sql(source_ddl(args.bootstrap, args.source))
    tenv.execute_sql(sink_ddl(args.bootstrap, args.out))
    client = tenv.execute_sql(alerts_sql()).get_job_client()
    job_id = str(client.get_job_id())
    while not _tasks_running(rest_port, job_id):
        status = client.get_job_status().result().name
        if status in TERMINAL:
            print(f"the job ended before it ran: {status}", flush=True)
            return 1
        time.sleep(0.2)
    args.ready.write_text(job_id)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    while not closed.wait(1.0):
        status = client.get_job_status().result().name
        if status in TERMINAL:
            print(f"the job ended on its own: {status}", flush=True)
            return 1
    client.cancel().result()
    return 0


def job_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--jar", type=Path, required=True, help="flink-sql-connector-kafka")
    parser.add_argument("--ready", type=Path, required=True, help="written with the job id once its tasks run")
    return run_job(parser.parse_args(argv))


def pyflink_alerts(bootstrap: str) -> Starter:
    """A ``Starter`` for ``speedlayer.bench.kafka_latency.measure_cell``: the job above on (input, output) topics."""
    from flink_env import ensure_pyflink

    env = ensure_pyflink()

    def start(source: str, out: str):
        workdir = Path(tempfile.mkdtemp(prefix="speedlayer-pyflink-"))
        log, ready = workdir / "job.log", workdir / "ready"
        command = [str(env.python), str(Path(__file__).resolve()), "--bootstrap", bootstrap, "--source", source,
                   "--out", out, "--jar", str(env.connector_jar), "--ready", str(ready)]
        with open(log, "wb") as output:
            process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT, cwd=workdir)
        _wait_ready(process, ready, log)
        return lambda: _stop(process, workdir)
    return start


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _wait_ready(process: subprocess.Popen, ready: Path, log: Path) -> None:
    """Return once the job wrote its ready file; a job that exits or times out first is a SpeedlayerError."""
    from speedlayer.core.errors import SpeedlayerError

    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.exists():
        if process.poll() is not None:
            raise SpeedlayerError(f"the PyFlink job exited ({process.returncode}) before it ran: {_last_line(log)}; "
                                  f"its log: {log}")
        if time.monotonic() > deadline:
            _end(process)
            raise SpeedlayerError(f"the PyFlink job did not run within {START_TIMEOUT_S:.0f} s; its log: {log}")
        time.sleep(0.2)


def _end(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _stop(process: subprocess.Popen, workdir: Path) -> None:
    """Close the job's stdin (it cancels the job and exits); the log is kept if that did not go cleanly."""
    import shutil

    ended_before = process.poll()
    process.stdin.close()
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _end(process)
    if ended_before is None and process.returncode == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"pyflink: the job process ended with {process.returncode}"
              f"{' before it was stopped' if ended_before is not None else ''}; its log: {workdir / 'job.log'}",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(job_main())
