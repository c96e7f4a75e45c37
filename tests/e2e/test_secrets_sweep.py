"""A secret planted everywhere a user can put one never reaches what a run writes, prints or serves.

One running job, with secrets in its source, its sinks, its second stream and its Spark settings, is
swept while it runs — its dashboard (JSON state, page, ``/metrics``) and Spark's UI (environment,
SQL plans, streaming queries, jobs, stages, REST API) — and after it stopped: its state directory,
Spark's log, the run manifest, its outputs and its terminal. Refused runs print none either.
"""

import json
import re
import signal
import urllib.request
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

import pytest

from speedlayer.runtime.stopping import STOP_TIMEOUT_S
from tests.e2e.killing import CliProcess, wait_for
from tests.servers import POSTGRES, REDIS, free_port

SECRET = "zq7Kx9Plant"  # each planted secret holds this, with a suffix of its own
AZURE_KEY = "fs.azure.account.key.acct.blob.core.windows.net"


def sweep(tmp_path, *results):
    """Every file under ``tmp_path`` (state dir, spark.log, manifest, outputs) and every stdout/stderr."""
    found = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    found += [f"output {i}" for i, r in enumerate(results) if SECRET in r.stdout + r.stderr]
    return found


def test_a_refused_run_prints_no_planted_secret(run_cli, tmp_path, postgres_url):
    """Refused before start (no Spark): the one-line errors name the setting, never its value."""
    password = f"{SECRET}1/ss#wo?rd@x"
    database = postgres_url.rsplit("/", 1)[1]
    option = run_cli("run", "wordcount", "--source", "generator://", "--option", f"token={SECRET}6")
    raw = run_cli("run", "fleet", "--sink", f"alerts=postgresql://postgres:{password}@{POSTGRES.host}/{database}")
    assert sweep(tmp_path, option, raw) == []
    assert option.returncode == 2 and raw.returncode == 2
    assert "percent-encode" in raw.stderr


# --- the same secrets, looked for in what a running job serves: its dashboard and Spark's UI -------

#: pages of Spark's UI that show settings, plans and queries (``{app}``: the application id)
SPARK_PAGES = ["/environment/", "/SQL/", "/StreamingQuery/", "/jobs/", "/stages/", "/api/v1/applications/{app}/environment",
               "/api/v1/applications/{app}/sql?details=true&planDescription=true", "/api/v1/applications/{app}/jobs"]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode(errors="replace")


def spark_ui_pages(base: str) -> dict[str, str]:
    """Every page of SPARK_PAGES, each SQL execution's page and each streaming query's statistics page."""
    app = json.loads(fetch(base + "/api/v1/applications"))[0]["id"]
    pages = {page: fetch(base + page.format(app=app)) for page in SPARK_PAGES}
    executions = json.loads(pages["/api/v1/applications/{app}/sql?details=true&planDescription=true"])
    for execution in executions:
        pages[f"/SQL/execution/?id={execution['id']}"] = fetch(f"{base}/SQL/execution/?id={execution['id']}")
    for run_id in set(re.findall(r"statistics/\?id=([0-9a-f-]{36})", pages["/StreamingQuery/"])):
        pages[f"/StreamingQuery/statistics/?id={run_id}"] = fetch(f"{base}/StreamingQuery/statistics/?id={run_id}")
    assert executions and len(pages) > len(SPARK_PAGES) + 1, sorted(pages)
    return pages


@pytest.fixture
def redis_user(redis_url):
    """A Redis stream of 400 pings, readable by an ACL user whose password is a planted secret; removed after."""
    import redis

    _, prefix = redis_url
    client = redis.Redis(host=REDIS.host, port=REDIS.port, db=0)
    user, password = f"{prefix}_u", f"{SECRET}7"
    client.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all"])
    now = datetime.now(timezone.utc) - timedelta(minutes=2)
    for i in range(400):
        client.xadd(f"{prefix}:0", {"value": json.dumps({
            "event_id": f"e{i}", "vehicle_id": f"v{i % 20}", "event_time": (now + timedelta(seconds=i / 4)).isoformat(),
            "speed_kmh": 20 + i % 90, "lat": 52.52, "lon": 13.40})})
    try:
        yield f"redis://{user}:{password}@{REDIS.host}:{REDIS.port}/0?stream={prefix}&shards=1"
    finally:
        client.acl_deluser(user)
        client.close()


@pytest.mark.slow
def test_no_planted_secret_reaches_what_a_running_job_serves_writes_or_prints(tmp_path_factory, redis_user, postgres_url):
    # not tmp_path: this test's name holds "secret", and Spark redacts every value holding it (a path too)
    tmp_path = tmp_path_factory.mktemp("served")
    dashboard, spark_ui = free_port(), free_port()
    database = postgres_url.rsplit("/", 1)[1]
    password = quote(f"{SECRET}8/ss#wo?rd@x", safe="")
    sink = f"postgresql://postgres:{password}@{POSTGRES.host}:{POSTGRES.port}/{database}?table=alerts"
    rides = f"kafka://127.0.0.1:9092/rides?kafka.sasl.jaas.config={SECRET}2&kafka.ssl.keystore.key={SECRET}3"
    process = CliProcess(["run", "fleet", "--source", redis_user, "--state-dir", "st", "--no-live", "--rides", rides,
                          "--sink", "windows=parquet:out/w", "--sink", f"alerts={sink}", "--sink", "dead-letters=console:",
                          "--dashboard", "--dashboard-port", str(dashboard), "--conf", f"spark.ui.port={spark_ui}",
                          "--conf", f"spark.hadoop.{AZURE_KEY}={SECRET}4",
                          "--conf", f"spark.kafka.ssl.keystore.key={SECRET}5"], tmp_path, tmp_path / "run.log")
    served = {}
    try:
        api = f"http://127.0.0.1:{dashboard}"

        def every_query_ran():
            try:
                queries = json.loads(fetch(api + "/api/state"))["queries"]
            except OSError:
                return False
            return len(queries) == 3 and all(q["batches"] >= 1 for q in queries)

        wait_for(every_query_ran, process, 180, "a batch of every query on the dashboard")
        served = {f"dashboard {page}": fetch(api + page) for page in ("/api/state", "/metrics", "/")}
        served.update({f"Spark UI {page}": text for page, text in spark_ui_pages(f"http://127.0.0.1:{spark_ui}").items()})
        process.proc.send_signal(signal.SIGINT)  # a graceful stop, like Ctrl-C
        assert process.wait(STOP_TIMEOUT_S + 60) == 0, process.tail()  # a graceful stop may wait that long
    finally:
        if process.proc.poll() is None:
            process.kill()
    # what was fetched is the real thing: the planted settings listed (redacted), the plans, every query
    shown = dict(json.loads(served["Spark UI /api/v1/applications/{app}/environment"])["sparkProperties"])
    assert shown["spark.kafka.ssl.keystore.key"] == shown[f"spark.hadoop.{AZURE_KEY}"] == "*********(redacted)"
    assert str(tmp_path) in shown["spark.driver.extraJavaOptions"]  # a value is not redacted for its path
    plans = json.loads(served["Spark UI /api/v1/applications/{app}/sql?details=true&planDescription=true"])
    assert any("MicroBatchScan" in plan["planDescription"] for plan in plans)
    assert sum(page.startswith("Spark UI /StreamingQuery/statistics") for page in served) >= 3
    assert "postgres:***@" in served["dashboard /api/state"]
    assert [page for page, text in served.items() if SECRET in text] == []
    # what it wrote and printed: the state dir, Spark's log, the manifest, the outputs, the terminal
    assert (tmp_path / "st" / "spark.log").is_file() and (tmp_path / "st" / "speedlayer-run.json").is_file()
    assert (tmp_path / "out" / "w" / "_spark_metadata").is_dir()
    assert "alerts -> postgresql://postgres:***@" in process.output()
    assert "stopped by Ctrl-C after" in process.output()  # the summary names the stop the user asked for
    assert sweep(tmp_path) == [] and SECRET not in process.output()
