"""The dashboard server without Spark: its page and assets, JSON state, /metrics, and a taken port."""

import json
import re
import socket
import urllib.error
import urllib.request

import pytest

from speedlayer.cli.app import main
from speedlayer.core.errors import ConfigError
from speedlayer.monitor.dashboard import open_server, run_state
from speedlayer.monitor.feed import ResultsFeed
from speedlayer.runtime.executors import ExecutorRecord, ExecutorWatch
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sinks.console import BatchView
from tests.runtime.test_metrics import RECORDED


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


@pytest.fixture
def served(tmp_path):
    settings = RunSettings(job="fleet", sinks={"windows": "memory:",
                                               "alerts": "postgresql://app:hunter2@db:5432/fleet"},
                           state_dir=str(tmp_path / "st"))
    run = Run(None, plan_run(settings))  # planned, not started: the server needs no Spark
    run.tracker.record(RECORDED[0])
    lists = iter([[ExecutorRecord("driver"), ExecutorRecord("0", "10.0.0.5:41000", cores=2),
                   ExecutorRecord("1", "10.0.0.6:41001", cores=2)],
                  [ExecutorRecord("driver"), ExecutorRecord("0", "10.0.0.5:41000", cores=2),
                   ExecutorRecord("1", "10.0.0.6:41001", False, 2, 1795354442114, "Worker lost")]])
    run.executors = ExecutorWatch(lambda: next(lists), local=False, since_ms=0)  # a cluster that loses one
    run.executors.poll()
    run.executors.poll(force=True)
    feed = ResultsFeed(feeds=["alerts"])
    feed.show_batch(BatchView("fleet", "alerts", 4, ["event_id", "vehicle_id", "speed_kmh"], [("e-9", "V0001", 97.5)], 1))
    feed.set_positions(4, [{"vehicle_id": "V0001", "lat": 52.5, "lon": 13.4, "speed_kmh": 97.5}], "vehicle_id")
    server = open_server("127.0.0.1", 0, explicit=True, warn=print)
    server.serve(run, feed)
    yield server
    server.close()


def test_state_holds_queries_metrics_feeds_and_no_secret(served):
    status, kind, body = get(served.url + "/api/state")
    assert status == 200 and kind == "application/json"
    assert "hunter2" not in body
    state = json.loads(body)
    windows = next(q for q in state["queries"] if q["output"] == "windows")
    assert windows["guarantee"] == "at-least-once" and windows["mode"] == "append"
    assert windows["checkpoint"].endswith("checkpoints/windows") and windows["trigger"] == "processing:0s"
    assert windows["series"]["latency_event_p99"] == [6400] and windows["latest"]["dead_letters"] == 20
    assert windows["series"]["late_events_kept"] == [None]  # only the late query observes it
    assert state["feeds"]["alerts"][0]["event_id"] == "e-9"
    assert state["positions"][0]["vehicle_id"] == "V0001" and state["zones"]
    assert state["map"] == {"key": "vehicle_id", "time": "event_time"}  # what the fleet declares


def test_a_job_that_declares_no_positions_has_no_map(tmp_path):
    settings = RunSettings(job="wordcount", source=f"files:{tmp_path}?format=text", sinks={"totals": "memory:t"},
                           state_dir=str(tmp_path / "st"))
    state = run_state(Run(None, plan_run(settings)), ResultsFeed())
    assert state["map"] is None and state["zones"] == []


def test_state_and_metrics_show_the_executors_and_the_lost_one(served):
    executors = json.loads(get(served.url + "/api/state")[2])["executors"]
    assert {k: executors[k] for k in ("local", "alive", "cores", "lost_count", "summary")} == {
        "local": False, "alive": 1, "cores": 2, "lost_count": 1, "summary": "1 (1 lost)"}
    assert executors["lost"] == [{"id": "1", "host_port": "10.0.0.6:41001", "lost_ms": 1795354442114,
                                  "lost_at": "2026-11-22T13:34:02.114Z", "reason": "Worker lost"}]
    text = get(served.url + "/metrics")[2]
    assert 'speedlayer_executors{speedlayer_job="fleet"} 1.0' in text
    assert 'speedlayer_executors_lost_total{speedlayer_job="fleet"} 1.0' in text
    assert "executorsKpi(s.executors)" in get(served.url + "/static/app.js")[2]


def test_state_and_metrics_show_the_runs_memory(served):
    memory = json.loads(get(served.url + "/api/state")[2])["memory"]
    assert set(memory) == {"driver_python", "driver_jvm", "python_workers", "workers"}
    assert 10 * 2**20 < memory["driver_python"] < 20 * 2**30  # this test process, resident
    text = get(served.url + "/metrics")[2]
    assert re.search(r'speedlayer_process_resident_bytes\{process="driver_python",speedlayer_job="fleet"\} [0-9.e+]+', text)
    assert "memoryKpi(s.memory)" in get(served.url + "/static/app.js")[2]


def test_page_and_assets_are_served_from_the_package(served):
    status, kind, page = get(served.url + "/")
    assert status == 200 and kind.startswith("text/html")
    assert "http://" not in page and "https://" not in page  # no CDN: everything from the job itself
    for asset in ("app.js", "charts.js", "app.css"):
        status, _, text = get(f"{served.url}/static/{asset}")
        assert status == 200 and "https://" not in text
    with pytest.raises(urllib.error.HTTPError):
        get(served.url + "/static/../dashboard.py")


def test_metrics_endpoint_speaks_prometheus(served):
    status, kind, text = get(served.url + "/metrics")
    assert status == 200 and kind.startswith("text/plain")
    assert 'speedlayer_input_rows_total{query="fleet_windows",speedlayer_job="fleet"} 10000.0' in text
    assert 'job="' not in text.replace("speedlayer_job=", "")  # Prometheus keeps job for the scrape job


def test_a_taken_port_is_one_line_or_an_error_when_chosen():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        lines = []
        assert open_server("127.0.0.1", port, explicit=False, warn=lines.append) is None
        assert len(lines) == 1 and f"port {port} on 127.0.0.1 is in use" in lines[0]
        with pytest.raises(ConfigError, match="choose another --dashboard-port"):
            open_server("127.0.0.1", port, explicit=True, warn=lines.append)


def test_cli_refuses_a_chosen_dashboard_port_in_use_before_spark_starts(capsys):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(SystemExit) as exit_info:
            main(["run", "fleet", "--max-events", "10", "--dashboard-port", str(holder.getsockname()[1])])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(lines) == 1 and "is in use: choose another --dashboard-port" in lines[0]


def test_a_failing_page_request_is_a_500_and_the_server_goes_on(served):
    def broken():
        raise RuntimeError("boom")

    served._state = broken
    with pytest.raises(urllib.error.HTTPError) as failed:
        get(served.url + "/api/state")
    assert failed.value.code == 500
    assert get(served.url + "/metrics")[0] == 200


def status_with_host(server, path: str, host: str | None) -> int:
    """The status of a GET sent with this Host header (as a page under a rebound DNS name would send)."""
    import http.client

    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.mark.parametrize("path", ["/", "/api/state", "/metrics", "/static/app.js"])
def test_a_foreign_host_header_is_refused_everywhere(served, path):
    port = served.server_address[1]
    assert status_with_host(served, path, f"evil.example:{port}") == 403
    assert status_with_host(served, path, "rebind.attacker.test") == 403


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}", "127.0.0.1"])
def test_the_dashboards_own_host_names_are_served(served, host):
    assert status_with_host(served, "/api/state", host.format(port=served.server_address[1])) == 200


def post(url: str, body: bytes, headers: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_the_sql_box_takes_json_from_its_own_page_only(served):
    url, json_type = served.url + "/api/sql", {"Content-Type": "application/json"}
    statement = json.dumps({"sql": "SELECT 1"}).encode()
    assert post(url, statement, {**json_type, "Origin": "http://evil.example"})[0] == 403  # another site's page
    assert post(url, statement, {"Content-Type": "text/plain"})[0] == 415  # a form another page could post
    status, body = post(url, statement, {**json_type, "Origin": served.url})
    assert status == 400 and json.loads(body) == {"error": "this run serves no SQL (started with --no-sql)"}


def test_the_sql_box_is_refused_on_a_dashboard_open_to_the_network(tmp_path):
    run = Run(None, plan_run(RunSettings(job="fleet", state_dir=str(tmp_path / "st"))))
    server = open_server("0.0.0.0", 0, explicit=True, warn=print)
    try:
        server.serve(run, None, sql=True)
        status, body = post(f"http://127.0.0.1:{server.server_address[1]}/api/sql", b'{"sql": "SELECT 1"}',
                            {"Content-Type": "application/json"})
    finally:
        server.close()
    assert status == 400 and "serves SQL on loopback only" in json.loads(body)["error"]
