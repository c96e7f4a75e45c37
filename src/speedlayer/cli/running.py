"""What ``speedlayer run`` does once its settings are valid: plan, start Spark, show, stop cleanly."""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from speedlayer.cli.debug import quiet_query_context_logs
from speedlayer.core.sizes import human_size
from speedlayer.monitor.dashboard import DEFAULT_PORT, DashboardServer, open_server
from speedlayer.monitor.feed import ResultsFeed
from speedlayer.monitor.view import LiveView, ProgressLog
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.session import build_session, check_java, check_master, exposure_note
from speedlayer.runtime.settings import RunSettings
from speedlayer.runtime.sql_endpoint import ENDPOINT_FILE, SqlEndpoint, forget_endpoint
from speedlayer.runtime.summary import RunSummary

log = logging.getLogger("speedlayer.monitor")


def summary_table(summary: RunSummary) -> Table:
    """The run's end in a table: per output what it did and its checkpoint's size on disk, the total below."""
    table = Table(title=f"stopped by {summary.stopped_by} after {summary.elapsed_s:,.1f}s", title_justify="left",
                  caption=f"checkpoints on disk: {human_size(summary.checkpoint_bytes)}", caption_justify="left")
    for column in ("output", "sink", "guarantee", "mode", "batches", "input rows", "final watermark", "checkpoint"):
        table.add_column(column)
    for q in summary.queries:
        rows = f"{q.input_rows:,}" if q.input_rows is not None else "not counted"
        table.add_row(q.output, q.sink, q.guarantee, q.mode, str(q.batches), rows, q.watermark or "-",
                      human_size(q.checkpoint_bytes))
    if any(q.input_rows is None for q in summary.queries):
        table.caption += " · continuous mode: batches are the epochs committed; Spark counts no rows in that mode"
    return table


@dataclass(frozen=True)
class Surfaces:
    """Where a run shows itself besides the terminal: the dashboard (with ``/metrics``) and a
    metrics-only port. A port given explicitly must be free; the default one may be skipped."""

    dashboard: bool = False
    dashboard_port: int | None = None
    host: str = "127.0.0.1"
    metrics_port: int | None = None
    #: serve Spark Connect for ad-hoc SQL and notebooks (``speedlayer.runtime.sql_endpoint``)
    sql: bool = False
    sql_port: int | None = None


def _bind(surfaces: Surfaces, errors: Console) -> tuple[DashboardServer | None, DashboardServer | None]:
    warn = lambda line: errors.print(line, soft_wrap=True)  # noqa: E731
    dashboard = metrics = None
    try:
        if surfaces.dashboard:
            explicit = surfaces.dashboard_port is not None
            dashboard = open_server(surfaces.host, surfaces.dashboard_port if explicit else DEFAULT_PORT, explicit, warn)
        if surfaces.metrics_port is not None:
            metrics = open_server(surfaces.host, surfaces.metrics_port, True, warn, "metrics endpoint", metrics_only=True)
    except Exception:
        if dashboard is not None:
            dashboard.close()
        raise
    return dashboard, metrics


def execute(settings: RunSettings, live: bool, console: Console, errors: Console,
            surfaces: Surfaces = Surfaces()) -> RunSummary:
    """Run a job to its end; Ctrl-C once stops after the current batch, twice stops now."""
    plan = plan_run(settings)
    settings = plan.settings  # with the job's defaults: one copy of the settings from here on
    check_java()
    check_master(settings.master)
    run = Run(None, plan, notify=lambda line: errors.print(f"note: {line}", soft_wrap=True))
    with run:  # released, and a temporary state directory removed, however the run ends
        run.prepare()  # before Spark: a second run on this state directory stops here
        servers = _bind(surfaces, errors)  # before Spark: a port the user chose must be free
        endpoint = SqlEndpoint.open(surfaces.host, surfaces.sql_port) if surfaces.sql else None
        try:
            return _execute(run, settings, live, console, errors, *servers, endpoint)
        finally:
            for server in servers:
                if server is not None:
                    server.close()
            if endpoint is not None:
                forget_endpoint(plan.state_dir)


def _execute(run: Run, settings: RunSettings, live: bool, console: Console, errors: Console,
             dashboard: DashboardServer | None, metrics: DashboardServer | None,
             endpoint: SqlEndpoint | None) -> RunSummary:
    plan = run.plan
    spark = _start_spark(run, settings, errors, endpoint)
    view = LiveView(console) if live else None
    log = None if live else ProgressLog(errors)
    feed = ResultsFeed(feeds=[n for n, o in plan.job.outputs.items() if not o.stateful]) if dashboard else None
    for query in plan.queries:
        if query.sink.shows_batches:
            query.sink.display = _fan_out(view.show_batch if view else query.sink.display,
                                          [feed.show_batch] if feed else [])
            if feed is not None:
                feed.fed_by_sink.add(query.output.name)
    if view is not None and dashboard is not None:
        view.dashboard_url = dashboard.url

    def on_started(run: Run) -> None:
        if dashboard is not None:
            _start_dashboard(run, dashboard, feed, errors, endpoint is not None)
        if metrics is not None:
            metrics.serve(run)
            errors.print(f"Prometheus metrics: {metrics.url}/metrics", soft_wrap=True)
        if view is not None:
            view.attach(run)
        if log is not None:
            log.attach(run)
        if endpoint is not None and endpoint.publish(run.spark, plan) is not None:
            errors.print(f"ad-hoc SQL: speedlayer sql --state-dir {plan.state_dir} (Spark Connect on {endpoint.url}, "
                         f"its token in {plan.state_dir / ENDPOINT_FILE})", soft_wrap=True)

    run.on_started = on_started

    def on_interrupt(signum, frame):
        if run.stop_requested.is_set():
            run.force_stop.set()
        else:
            run.stop_reason = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        run.stop_requested.set()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    try:
        run.start(spark)
        also = "".join(f" ({name} from {source.describe()})" for name, source in plan.inputs.items())
        errors.print(f"running {plan.job.name} from {plan.source.describe()}{also}: "
                     + ", ".join(f"{q.output.name} -> {q.sink.describe()} ({q.mode}, {q.sink.guarantee})" for q in plan.queries),
                     soft_wrap=True)
        summary = run.wait()
    finally:
        if view is not None:
            view.close()
        if log is not None:
            log.close()
        signal.signal(signal.SIGINT, previous)
    console.print(summary_table(summary))
    if not plan.temporary_state:
        console.print(f"state kept in {Path(plan.state_dir)}: the same command resumes from it")
    return summary


def _start_spark(run: Run, settings: RunSettings, errors: Console, endpoint: SqlEndpoint | None):
    """The run's Spark session, its log under the state dir, after the run's notes and what it exposes."""
    quiet_query_context_logs()
    plan = run.plan
    for note in run.notes:
        errors.print(f"note: {note}", soft_wrap=True)
    log_file = plan.state_dir / "spark.log"
    errors.print(f"starting Spark ({settings.master}); Spark's log: {log_file}", soft_wrap=True)
    exposed = exposure_note(settings.master, settings.spark_ui)
    if exposed:
        errors.print(f"note: {exposed}", soft_wrap=True)
    conf = endpoint.spark_conf(plan.state_dir, settings.spark_conf()) if endpoint else settings.spark_conf()
    return build_session(settings.master, conf, app_name=f"speedlayer-{plan.job.name}", log_file=log_file,
                         spark_ui=settings.spark_ui, ship=settings.ship, packages=plan.spark_packages(),
                         connector_conf=plan.spark_conf(),
                         announce=lambda line: errors.print(f"note: {line}", soft_wrap=True))


def _fan_out(primary, extras):
    """A console sink's display that also feeds the dashboard; a failing extra never fails the batch."""
    def show(view) -> None:
        primary(view)
        for extra in extras:
            try:
                extra(view)
            except Exception as exc:  # noqa: BLE001
                log.warning("speedlayer: dashboard feed failed: %s", exc)
    return show


def _start_dashboard(run: Run, server: DashboardServer, feed: ResultsFeed | None, errors: Console, sql: bool) -> None:
    """Serve the dashboard and start its tap query; a failure here is one line, never the run's end."""
    from speedlayer.monitor.tap import start_tap

    try:
        server.serve(run, feed, sql)
        tap = start_tap(run, feed) if feed is not None else None
        if tap is not None:
            run.add_side_query(tap, restart=lambda: start_tap(run, feed))
        errors.print(f"dashboard: {server.url}  (Prometheus: {server.url}/metrics)", soft_wrap=True)
    except Exception as exc:  # noqa: BLE001 — the dashboard never stops the job
        errors.print(f"note: the dashboard could not start: {' '.join(str(exc).split())[:300]}", soft_wrap=True)
