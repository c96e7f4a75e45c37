"""A live fleet run with its dashboard: /metrics scraped while it runs, the page in headless Chromium,
and ``speedlayer status`` on its checkpoints once it stopped.

One bounded, paced run (in this process, on the shared session) serves the tests that need a run. Chromium is
Debian's (``/usr/bin/chromium``, installed by ``make test``) driven by Playwright; Playwright's own
browsers are never downloaded. Set SPEEDLAYER_UPDATE_SCREENSHOT=1 to refresh docs/dashboard.png.
"""

import os
import threading
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from speedlayer.monitor.dashboard import open_server
from speedlayer.monitor.feed import ResultsFeed
from speedlayer.monitor.status import add_operators, find_checkpoints
from speedlayer.monitor.tap import start_tap
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.conftest import ARTIFACTS, ROOT
from tests.helpers import batch_output
from tests.runtime.test_metrics import RECORDED
from tests.servers import unavailable

CHROMIUM = "/usr/bin/chromium"
SOURCE = "generator://?rate=2000&vehicles=400&seed=11&partitions=2"
MAX_EVENTS = 30_000  # 15 s of events: a first batch late by a busy machine still leaves batches after it


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, s.labels.get("query"), s.labels.get("since"), s.labels.get("percentile")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def live(spark, tmp_path_factory):
    state = tmp_path_factory.mktemp("dash") / "state"
    tag = uuid.uuid4().hex[:8]
    settings = RunSettings(job="fleet", source=SOURCE, max_events=MAX_EVENTS, state_dir=str(state),
                           sinks={"windows": f"memory:dash_windows_{tag}", "alerts": f"memory:dash_alerts_{tag}"})
    run = Run(spark, plan_run(settings))
    feed = ResultsFeed(feeds=["alerts"])
    server = open_server("127.0.0.1", 0, explicit=True, warn=print)
    scrapes = []

    def scrape_after_batch(metrics) -> None:  # on the listener's thread: a scrape during the run
        if metrics.query == run.plan.queries[0].name:
            scrapes.append(scrape(server.url))

    def on_started(started: Run) -> None:
        server.serve(started, feed, sql=True)
        tap = start_tap(started, feed)
        if tap is not None:
            started.side_queries.append(tap)
        started.tracker.subscribe(scrape_after_batch)

    run.on_started = on_started
    run.start()
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("summary", run.wait()), daemon=True)
    waiter.start()
    yield {"run": run, "server": server, "scrapes": scrapes, "settings": settings, "state": state,
           "waiter": waiter, "result": result}
    run.stop_requested.set()
    waiter.join(120)
    server.close()


@contextmanager
def chromium():
    """Debian's Chromium, headless, driven by Playwright."""
    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} is missing: apt-get install chromium (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            yield browser
        finally:
            browser.close()


def test_the_page_says_when_the_input_runs_ahead_of_processing(tmp_path):
    """A run whose source lag grew in each of its last batches (recorded, no Spark): the source lag tile
    turns amber and says by how much the input is ahead."""
    run = Run(None, plan_run(RunSettings(job="fleet", sinks={"windows": "memory:"}, state_dir=str(tmp_path / "st"))))
    lags = iter([1_000, 5_000, 9_000, 14_000, 20_000, 27_000])
    run.tracker.source_lag = lambda source: next(lags)
    for batch in range(6):
        run.tracker.record({**RECORDED[0], "batchId": batch})
    server = open_server("127.0.0.1", 0, explicit=True, warn=print)
    server.serve(run, ResultsFeed(feeds=[]))
    try:
        with chromium() as browser:
            page = browser.new_page()
            page.goto(server.url)
            page.wait_for_selector("#kpi-behind", timeout=60_000)
            assert "input ahead of processing by 27k, growing" in page.inner_text("#kpi-behind").lower()
            assert "warn" in page.get_attribute("#kpi-behind", "class")
    finally:
        server.close()


def test_dashboard_page_moves_in_chromium(live):
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1360, "height": 1500})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(live["server"].url)
        page.wait_for_function("Number(document.querySelector('#chart-rates').dataset.points || 0) > 0", timeout=60_000)
        first = page.eval_on_selector("#chart-rates", "c => [Number(c.dataset.points), c.dataset.lastT]")
        page.wait_for_function(f"Number(document.querySelector('#chart-rates').dataset.points || 0) > {first[0]}",
                               timeout=60_000)
        page.wait_for_function("Number(document.querySelector('#map').dataset.vehicles || 0) > 0", timeout=60_000)
        page.wait_for_function("document.querySelectorAll('#alerts li.alert').length > 0", timeout=60_000)
        page.wait_for_function("Number(document.querySelector('#chart-latency').dataset.points || 0) > 0", timeout=60_000)
        second = page.eval_on_selector("#chart-rates", "c => [Number(c.dataset.points), c.dataset.lastT]")
        assert second[1] != first[1]  # a newer batch is drawn
        assert "running" in page.inner_text("#conn") or "stopped" in page.inner_text("#conn")
        assert page.locator("#queries tbody tr").count() == 2
        assert page.locator("#speeders tbody tr").count() > 0
        # the generator stamps each event's ingest time: the latency shown first is since ingest
        assert "latency since ingest p50 / p95 / p99" in page.inner_text("#kpis").lower()  # CSS shows it upper-case
        assert page.eval_on_selector("#chart-latency", "c => c.dataset.series").split("|") == [
            "since ingest p50", "since ingest p95", "since ingest p99", "since event p99 (+ producer delay, disorder)"]
        # the SQL box: the job answers over its state; a time series is drawn too; a write is refused
        ask = lambda sql: (page.fill("#sql-text", sql), page.click("#sql-run"))  # noqa: E731
        ask("SELECT count(*) AS open_windows FROM windows_state_aggregation")
        page.wait_for_function("document.querySelector('#sql-status').textContent === '1 row'", timeout=60_000)
        assert int(page.inner_text("#sql-result td")) > 0 and page.locator("#sql-chart-box").is_hidden()
        ask("SELECT timestamp_seconds(id * 10) AS t, id * id AS squared FROM range(5)")
        page.wait_for_function("document.querySelector('#sql-chart').dataset.points === '5'", timeout=60_000)
        assert page.eval_on_selector("#sql-chart", "c => c.dataset.last") == "16"
        ask("DROP TABLE windows")
        page.wait_for_function("document.querySelector('#sql-status').textContent.endsWith('not DROP')",
                               timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        if os.environ.get("SPEEDLAYER_UPDATE_SCREENSHOT"):
            page.screenshot(path=str(ROOT / "docs" / "dashboard.jpg"), type="jpeg", quality=70,
                            clip={"x": 0, "y": 0, "width": 1360, "height": 1180})
        assert not errors, errors


def test_metrics_are_scraped_while_the_run_moves(live):
    run, scrapes = live["run"], live["scrapes"]
    live["waiter"].join(180)  # the bounded run ends by itself
    assert "summary" in live["result"]
    windows = run.plan.queries[0].name
    rows = [s[("speedlayer_input_rows_total", windows, None, None)] for s in scrapes]
    assert len(rows) >= 3 and rows == sorted(rows) and rows[-1] > rows[0]
    final = scrape(live["server"].url)
    assert final[("speedlayer_batches_total", windows, None, None)] >= 3
    assert any(final.get(("speedlayer_latency_seconds", windows, "event", q), 0) > 0 for q in ("p50", "p99"))
    assert final[("speedlayer_duplicates_removed_total", windows, None, None)] > 0
    # dead letters counted from the observation equal what decode refuses in a batch recomputation
    settings = live["settings"].model_copy(update={"source": f"{SOURCE}&start={run.plan.source.start_ms}"})
    expected_dead = batch_output(run.spark, settings, "dead-letters").count()
    assert final[("speedlayer_dead_letters_total", windows, None, None)] == expected_dead > 0


def test_status_reads_the_checkpoints_of_the_run(live, spark):
    live["waiter"].join(180)
    statuses = {s.name: s for s in find_checkpoints(live["state"])}
    assert {"windows", "alerts"} <= set(statuses)
    windows = statuses["windows"]
    assert windows.last_committed is not None and windows.last_committed >= 2 and windows.watermark
    add_operators(spark, [windows])
    assert {op["operatorName"] for op in windows.operators} >= {"stateStoreSave", "dedupeWithinWatermark"}
