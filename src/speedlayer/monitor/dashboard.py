"""The web dashboard served by a running job: a page, its JSON state and Prometheus ``/metrics``.

Plain ``http.server`` in a daemon thread; the page (``static/``, packaged with speedlayer, no CDN)
asks ``/api/state`` once a second. It binds to 127.0.0.1 unless told otherwise, answers only requests
whose ``Host`` is its own (DNS rebinding), shows only masked URIs, and any failure in it is logged
and answered with a 500: it never stops the job.

>>> server = open_server("127.0.0.1", 8765, explicit=False, warn=print)  # doctest: +SKIP
>>> server.serve(run, feed); server.url                                    # doctest: +SKIP
'http://127.0.0.1:8765'
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import mimetypes
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from speedlayer.core.errors import ConfigError
from speedlayer.core.uris import mask_secrets
from speedlayer.monitor.feed import ResultsFeed
from speedlayer.monitor.prometheus import metrics_registry
from speedlayer.runtime.metrics import falling_behind
from speedlayer.runtime.processes import run_memory
from speedlayer.runtime.progress import DURATION_BUCKETS
from speedlayer.runtime.sql_endpoint import is_loopback
from speedlayer.sources.base import partition_lag

if TYPE_CHECKING:
    from speedlayer.runtime.run import Run

log = logging.getLogger("speedlayer.monitor")

DEFAULT_PORT = 8765
#: the longest statement the SQL box takes
MAX_SQL_BYTES = 100_000
#: why the SQL box answers nothing, unless the run serves it
NO_SQL = "this run serves no SQL (started with --no-sql)"
#: batches of each timeline sent to the page
SERIES = 180


def _series(metrics: list) -> dict[str, Any]:
    def lat(m, since: str, q: str):
        return (m.latency_ms.get(since) or {}).get(q)

    phases = sorted({p for m in metrics for p in m.phases_ms})
    return {
        "t": [m.ended_ms for m in metrics],
        "batch_id": [m.batch_id for m in metrics],
        "input_rows": [m.records_read for m in metrics],
        "input_rate": [round(m.input_rate, 1) for m in metrics],
        "processing_rate": [round(m.processing_rate, 1) for m in metrics],
        "batch_ms": [m.batch_ms for m in metrics],
        "scheduling_delay_ms": [m.scheduling_delay_ms for m in metrics],
        **{f"latency_{since}_{q}": [lat(m, since, q) for m in metrics]
           for since in ("event", "ingest") for q in ("p50", "p95", "p99")},
        "watermark_lag_ms": [m.watermark_lag_ms for m in metrics],
        "dropped_by_watermark": [m.dropped_by_watermark for m in metrics],
        "duplicates_removed": [m.duplicates_removed for m in metrics],
        "dead_letters": [m.dead_letters for m in metrics],
        "late_events_kept": [m.late_events_kept for m in metrics],
        "state_rows": [sum(op.rows for op in m.state) for m in metrics],
        "state_memory_bytes": [sum(op.memory_bytes for op in m.state) for m in metrics],
        "source_lag": [m.source_lag for m in metrics],
        "phases": {p: [m.phases_ms.get(p, 0) for m in metrics] for p in phases},
    }


def _query_error(query: Any, tracked: Any) -> str | None:
    if tracked is not None and tracked.error:
        return mask_secrets(tracked.error)
    try:
        if query is not None and not query.isActive and query.exception() is not None:
            from speedlayer.runtime.stopping import first_line

            return mask_secrets(first_line(query.exception()))
    except Exception:  # noqa: BLE001 — a query being torn down may not answer
        return None
    return None


def _areas(run: Run) -> list[dict[str, Any]]:
    """The rectangles the job's map draws under its positions (``Positions.areas``: the fleet's zones)."""
    positions = run.plan.job.positions
    if positions is None or positions.areas is None:
        return []
    try:
        return positions.areas(run.plan.params)
    except Exception:  # noqa: BLE001 — the map draws without its areas
        return []


def _map(run: Run) -> dict[str, str] | None:
    """What the page's map reads each position by: the entity's key and its time; None: the job has no map."""
    positions = run.plan.job.positions
    return None if positions is None else {"key": positions.key, "time": run.plan.job.schema.time_field}


def run_state(run: Run, feed: ResultsFeed | None, zones: list | None = None) -> dict[str, Any]:
    """Everything the page shows, JSON-ready; URIs masked."""
    plan = run.plan
    tracked = run.tracker.snapshot()
    started = {q.name: q for q in run.queries}
    queries = []
    for qp in plan.queries:
        t = tracked.get(qp.name)
        query = started.get(qp.name)
        latest = t.latest.as_dict() if t is not None and t.latest is not None else None
        series = run.tracker.series(qp.name)
        queries.append({
            "name": qp.name, "output": qp.output.name, "sink": qp.sink.describe(), "guarantee": qp.sink.guarantee,
            "mode": qp.mode, "trigger": str(plan.trigger), "checkpoint": str(qp.checkpoint),
            "stateful": run.outputs[qp.output.name].stateful,
            "active": bool(query is not None and query.isActive),
            "error": _query_error(query, t),
            "batches": t.batches if t else 0, "input_rows": t.input_rows if t else 0,
            "watermark": t.watermark if t else None, "totals": dict(t.totals) if t else {},
            "latest": latest, "series": _series(series[-SERIES:]), "behind": falling_behind(series),
            "partition_lag": {f"{topic}/{partition}": behind
                              for (topic, partition), behind in partition_lag(t.sources if t else []).items()},
            "duration_hist": {"buckets": [b if b != float("inf") else None for b in DURATION_BUCKETS],
                              "counts": list(t.duration_counts) if t else []},
        })
    state = {
        "job": plan.job.name, "source": plan.source.describe(), "trigger": str(plan.trigger),
        "state_dir": str(plan.state_dir), "now_ms": int(time.time() * 1000),
        "elapsed_s": round(time.monotonic() - run._started_at, 1) if run._started_at else 0,
        "outputs": {name: {"stateful": o.stateful, "summary": o.summary} for name, o in plan.job.outputs.items()},
        "queries": queries,
        "stopping": run.stop_requested.is_set(),
        # executors running the tasks: {"local", "alive", "cores", "lost_count", "lost": [...], "summary": "2 (1 lost)"}
        "executors": run.executors.poll().as_dict(),
        # resident bytes of the run's processes: {"driver_python", "driver_jvm", "python_workers", "workers"}
        "memory": asdict(run_memory()),
    }
    state.update(feed.snapshot() if feed is not None else {"latest": {}, "feeds": {}, "positions": []})
    state["zones"] = zones or []
    state["map"] = _map(run)
    return state


def _host_name(header: str) -> str:
    """The name in a Host header, without its port.

    >>> _host_name("[::1]:8765"), _host_name("LocalHost:8765"), _host_name("127.0.0.1")
    ('::1', 'localhost', '127.0.0.1')
    """
    host = header.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dashboard: " + format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if not self.server.serves_host(self.headers.get("Host")):
                self._send(403, b"this dashboard answers only to its own address (Host header refused)\n", "text/plain")
            elif path == "/metrics":
                self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
            elif self.server.metrics_only:
                self._send(404, b"only /metrics here\n", "text/plain")
            elif path == "/api/state":
                body = json.dumps(self.server.state(), default=str, allow_nan=False).encode()
                self._send(200, body, "application/json")
            elif path in ("/", "/index.html"):
                self._static("index.html")
            elif path.startswith("/static/"):
                self._static(path.removeprefix("/static/"))
            else:
                self._send(404, b"not found\n", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # noqa: BLE001 — the dashboard never stops the job
            log.warning("speedlayer: dashboard request %s failed: %s", path, exc)
            try:
                self._send(500, f"dashboard error: {exc}\n".encode(), "text/plain")
            except Exception:  # noqa: BLE001
                pass

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if not self.server.serves_host(self.headers.get("Host")) or not self._same_origin():
                self._send(403, b"this dashboard answers only to its own pages (Host or Origin refused)\n", "text/plain")
            elif path != "/api/sql" or self.server.metrics_only:
                self._send(404, b"not found\n", "text/plain")
            elif self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
                self._send(415, b"send the statement as JSON: {\"sql\": \"SELECT ...\"}\n", "text/plain")
            else:
                self._answer_sql()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # noqa: BLE001 — the dashboard never stops the job
            log.warning("speedlayer: dashboard request %s failed: %s", path, exc)
            self._json(500, {"error": f"dashboard error: {exc}"})

    def _same_origin(self) -> bool:
        """A browser's cross-site request names its page's origin: only the dashboard's own page may ask."""
        origin = self.headers.get("Origin")
        return origin is None or origin.split("://", 1)[-1].lower() == (self.headers.get("Host") or "").lower()

    def _answer_sql(self) -> None:
        box = self.server.sql_box
        if box is None:
            self._json(400, {"error": self.server.sql_refusal})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_SQL_BYTES:
            self._json(413, {"error": f"a statement of at most {MAX_SQL_BYTES:,} bytes"})
            return
        try:
            statement = json.loads(self.rfile.read(length) or b"{}").get("sql", "")
            self._json(200, box.ask(str(statement)))
        except (ValueError, AttributeError):
            self._json(400, {"error": 'send the statement as JSON: {"sql": "SELECT ..."}'})
        except ConfigError as exc:
            self._json(400, {"error": str(exc)})

    def _json(self, status: int, body: dict) -> None:
        self._send(status, json.dumps(body, default=str, allow_nan=False).encode(), "application/json")

    def _static(self, name: str) -> None:
        if "/" in name or name.startswith("."):
            self._send(404, b"not found\n", "text/plain")
            return
        file = resources.files("speedlayer.monitor").joinpath("static", name)
        if not file.is_file():
            self._send(404, b"not found\n", "text/plain")
            return
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        textual = kind.startswith("text/") or kind.endswith("javascript")
        self._send(200, file.read_bytes(), kind + ("; charset=utf-8" if textual else ""))


class DashboardServer(ThreadingHTTPServer):
    """Bound at construction (so a taken port is known before Spark starts); ``serve`` starts it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, metrics_only: bool = False):
        super().__init__((host, port), _Handler)
        self.metrics_only = metrics_only
        self.own_names = {"localhost", host.lower(), socket.gethostname().lower(), socket.getfqdn().lower()}
        self.registry = None
        self.sql_box: Any = None
        self.sql_refusal = NO_SQL
        self._state: Callable[[], dict] = dict
        self._thread: threading.Thread | None = None

    def serves_host(self, header: str | None) -> bool:
        """Whether a request's ``Host`` is this server's own: an IP address, localhost, its bound name or
        this machine's name. A page on another name (DNS rebinding) must not read the job's state."""
        if header is None:  # HTTP/1.0 without Host: no browser sends that
            return True
        host = _host_name(header)
        try:
            ipaddress.ip_address(host)
            return True
        except ValueError:
            return host in self.own_names

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def serve(self, run: Run, feed: ResultsFeed | None = None, sql: bool = False) -> None:
        """Serve ``run``'s page, state and metrics; with ``sql``, the SQL box too (``sql_views.SqlBox``),
        where the dashboard listens on loopback only: it asks no token."""
        if sql and not is_loopback(self.server_address[0]):
            self.sql_refusal = ("the dashboard serves SQL on loopback only (it asks no token): use speedlayer sql "
                                f"--state-dir {run.plan.state_dir}, which sends the run's token")
        elif sql:
            from speedlayer.monitor.sql_views import SqlBox

            self.sql_box = SqlBox(run.spark, run.plan.state_dir)
        self.registry = metrics_registry(run.plan.job.name, run.tracker, run.executors)
        zones = _areas(run) if not self.metrics_only else []
        self._state = lambda: run_state(run, feed, zones)
        self._thread = threading.Thread(target=self.serve_forever, name="speedlayer-dashboard", daemon=True)
        self._thread.start()

    def state(self) -> dict:
        return self._state()

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
        self.server_close()


def open_server(host: str, port: int, explicit: bool, warn: Callable[[str], None], what: str = "dashboard",
                metrics_only: bool = False) -> DashboardServer | None:
    """Bind the server now. A port in use: ConfigError when the user chose it (``explicit``),
    else one line through ``warn`` and None (the run goes on without it)."""
    try:
        return DashboardServer(host, port, metrics_only)
    except OSError as exc:
        flag = "--metrics-port" if metrics_only else "--dashboard-port"
        reason = (f"port {port} on {host} is in use" if exc.errno == errno.EADDRINUSE
                  else f"cannot listen on {host}:{port}: {exc.strerror or exc}")
        if explicit:
            raise ConfigError(f"{what}: {reason}: choose another {flag}, or stop what holds it") from None
        warn(f"note: no {what}: {reason} (choose another with {flag})")
        return None
