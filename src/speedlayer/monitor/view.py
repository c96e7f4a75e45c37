"""The live terminal view of a run (rich): rates per query and the latest rows of each console output."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from speedlayer.core.times import iso
from speedlayer.sinks.console import BatchView, render_table

if TYPE_CHECKING:
    from speedlayer.runtime.run import Run


def _ms(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:,.1f}s" if value >= 10_000 else f"{value:,}ms"


def executors_line(run: Run) -> str | None:
    """The view's executors field: ``executors 2 (1 lost), 4 cores · last lost: 1 at 13:50:02Z (Worker lost)``."""
    report = run.executors.poll()
    if report.alive is None:
        return None
    line = report.short()
    if report.lost:
        last = report.lost[-1]
        at = (iso(last.lost_ms) or "").replace("T", " ")[11:19]
        line += f" · last lost: {last.id} at {at}Z" + (f" ({last.reason})" if last.reason else "")
    return line


def rates_table(run: Run) -> Table:
    """One row per query: batches, rates, last batch time, latency p50/p95/p99 since ingest (since the event, marked,
    where the source stamps no ingest time), watermark and its lag."""
    table = Table(title="queries", title_justify="left", expand=False)
    columns = ("output", "sink", "mode", "batches", "input rows/s", "processed rows/s", "batch",
               "latency since ingest p50/p95/p99", "watermark", "wm lag")
    for column in columns:
        table.add_column(column, justify="left" if column in ("output", "sink", "mode", "watermark") else "right")
    progress = run.tracker.snapshot()
    for qp in run.plan.queries:
        p = progress.get(qp.name)
        m = p.latest if p else None
        since, latency = p.leading_latency if p else ("ingest", {})
        table.add_row(
            qp.output.name, qp.sink.describe(), qp.mode,
            str(p.batches) if p else "0",
            f"{p.input_rate:,.0f}" if p else "-",
            f"{p.processing_rate:,.0f}" if p else "-",
            _ms(p.batch_ms) if p else "-",
            " / ".join(_ms(latency.get(q)) for q in ("p50", "p95", "p99")) + ("" if since == "ingest" else " (event)")
            if latency else "-",
            (p.watermark or "-").replace("T", " ").removesuffix(".000Z") if p else "-",
            _ms(m.watermark_lag_ms) if m else "-",
        )
    return table


class LiveView:
    """Redraws in place a few times a second while a run goes on; falls back to plain prints."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console()
        self._latest: dict[str, BatchView] = {}
        self._lock = threading.Lock()
        self._run: Run | None = None
        self._live: Live | None = None
        self._started = time.monotonic()
        #: shown in the header when the run serves a dashboard
        self.dashboard_url: str | None = None

    def show_batch(self, view: BatchView) -> None:
        """Replace the rows shown for ``view.output`` (called from each console sink's batch)."""
        with self._lock:
            self._latest[view.output] = view

    def __rich__(self) -> Group:
        parts = []
        if self._run is not None:
            plan = self._run.plan
            elapsed = time.monotonic() - self._started
            header = (f"[b]{plan.job.name}[/b] · {plan.source.describe()} · trigger {plan.trigger} · "
                      f"{elapsed:,.0f}s · Ctrl-C stops after the current batch")
            executors = executors_line(self._run)
            if executors:
                header += f"\n{escape(executors)}"
            if self.dashboard_url:
                header += f"\ndashboard [link={self.dashboard_url}]{self.dashboard_url}[/link]"
            parts.append(Panel(header, expand=False))
            parts.append(rates_table(self._run))
        with self._lock:
            parts.extend(render_table(v) for v in self._latest.values())
        return Group(*parts)

    def attach(self, run: Run) -> None:
        self._run = run
        self._started = time.monotonic()
        self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
