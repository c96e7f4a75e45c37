"""``speedlayer sql`` against a running job: answers from inside the job's own Spark application through
Spark Connect, on loopback, with a token, read-only; the endpoint is gone once the run stops."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from speedlayer.runtime.sql_endpoint import ENDPOINT_FILE, SqlEndpoint
from tests.e2e.test_local_binding import listening
from tests.helpers import committed_parquet
from tests.testing.events import fleet_pings

CLIENT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
print(spark.sql("SELECT 1 AS one").collect())
"""


def _wait_for(check, what: str, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_running_job_answers_sql_on_loopback_with_a_token_and_read_only(run_cli, tmp_path):
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "pings.jsonl").write_text("\n".join(json.dumps(p) for p in fleet_pings()) + "\n")
    env = {**os.environ, "COLUMNS": "200"}
    job = subprocess.Popen([sys.executable, "-m", "speedlayer", "run", "fleet", "--source",
                            f"files://{tmp_path / 'landing'}?format=json", "--sink", "windows=parquet:out/windows",
                            "--state-dir", "st", "--no-live", "--duration", "300"],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        endpoint_file = tmp_path / "st" / ENDPOINT_FILE
        _wait_for(lambda: endpoint_file.is_file(), "the SQL endpoint")
        commits = tmp_path / "st" / "checkpoints" / "windows" / "commits"
        _wait_for(lambda: (commits / "1").is_file(), "the windows' no-data batch that closes the last windows")
        endpoint = json.loads(endpoint_file.read_text())
        assert stat.S_IMODE(endpoint_file.stat().st_mode) == 0o600

        answer = run_cli("sql", "--state-dir", "st", "--format", "json",
                         "SELECT count(*) AS n, sum(events) AS events FROM windows")
        assert answer.returncode == 0, answer.stderr[-2000:]
        assert "asking the running job" in answer.stderr
        files = pq.ParquetDataset(committed_parquet(tmp_path / "out" / "windows")).read().to_pylist()
        assert json.loads(answer.stdout) == {"n": len(files), "events": sum(r["events"] for r in files)} and files

        java = next(p for p in psutil.Process(job.pid).children(recursive=True) if p.name() == "java")
        assert f"127.0.0.1:{endpoint['port']}" in listening(java.pid)  # loopback, as every server speedlayer starts
        for url, refusal in ((endpoint["url"], "No authentication token provided"),
                             (f"{endpoint['url']}/;token=guessed", "Invalid authentication token")):
            client = subprocess.run([sys.executable, "-c", CLIENT, url], capture_output=True, text=True, timeout=120)
            assert client.returncode != 0 and refusal in client.stderr, client.stderr[-1000:]

        refused = run_cli("sql", "--state-dir", "st", "DROP TABLE windows")
        assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
            "error: speedlayer sql only reads: a statement starts with SELECT, WITH, VALUES, TABLE, FROM, SHOW, "
            "DESCRIBE or EXPLAIN, not DROP"]
    finally:
        job.send_signal(signal.SIGINT)
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            for process in [*psutil.Process(job.pid).children(recursive=True), psutil.Process(job.pid)]:
                process.kill()
            raise AssertionError(f"the run did not stop within 120 s of Ctrl-C: {job.communicate()[1][-3000:]}") from None
    assert job.returncode == 0, job.stderr.read()[-2000:]
    assert not (tmp_path / "st" / ENDPOINT_FILE).exists()


def test_another_host_opens_the_endpoint_with_its_token(tmp_path):
    endpoint = SqlEndpoint.open("0.0.0.0", None)
    conf = endpoint.spark_conf(tmp_path, {"spark.plugins": "com.example.Mine", "spark.connect.grpc.binding.port": "1"})
    assert conf["spark.connect.grpc.binding.address"] == "0.0.0.0" and len(endpoint.token) >= 32
    assert conf["spark.connect.authenticate.token"] == endpoint.token
    assert conf["spark.plugins"] == "com.example.Mine,org.apache.spark.sql.connect.SparkConnectPlugin"
    assert conf["spark.connect.grpc.binding.port"] == "1"  # what the user sets wins
    assert endpoint.url == f"sc://localhost:{endpoint.port}"  # a client on this machine sends its token without TLS
    assert Path(conf["spark.scheduler.allocation.file"]).read_text().count("<pool ") == 3



def test_a_given_port_that_is_taken_is_one_line_before_spark_starts():
    import socket

    import pytest

    from speedlayer.core.errors import ConfigError

    with socket.create_server(("127.0.0.1", 0)) as squatter:
        port = squatter.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--sql-port {port} is taken on 127.0.0.1: give another, or leave "
                                              "--sql-port out"):
            SqlEndpoint.open("127.0.0.1", port)
