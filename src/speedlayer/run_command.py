"""What ``speedlayer run`` does once its settings are valid: plan, start Spark, show, stop cleanly."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from rich.console import Console
from rich.table import Table

from speedlayer.config import RunSettings
from speedlayer.monitor.view import LiveView
from speedlayer.runner import Run, RunSummary, plan_run, prepare_state
from speedlayer.session import build_session, check_java
from speedlayer.sinks.console import ConsoleSink


def summary_table(summary: RunSummary) -> Table:
    table = Table(title=f"stopped by {summary.stopped_by} after {summary.elapsed_s:,.1f}s", title_justify="left")
    for column in ("output", "sink", "guarantee", "mode", "batches", "input rows", "final watermark"):
        table.add_column(column)
    for q in summary.queries:
        table.add_row(q.output, q.sink, q.guarantee, q.mode, str(q.batches), f"{q.input_rows:,}", q.watermark or "-")
    return table


def execute(settings: RunSettings, live: bool, console: Console, errors: Console) -> RunSummary:
    """Run a job to its end; Ctrl-C once stops after the current batch, twice stops now."""
    plan = plan_run(settings)
    try:
        check_java()
        prepare_state(plan)
    except Exception:
        if plan.temporary_state:
            shutil.rmtree(plan.state_dir, ignore_errors=True)
        raise
    for note in plan.notes:
        errors.print(f"note: {note}", soft_wrap=True)
    log_file = plan.state_dir / "spark.log"
    errors.print(f"starting Spark ({settings.master}); Spark's log: {log_file}", soft_wrap=True)
    spark = build_session(settings.master, settings.conf, app_name=f"speedlayer-{plan.job.name}", log_file=log_file)

    view = LiveView(console) if live else None
    if view is not None:
        for query in plan.queries:
            if isinstance(query.sink, ConsoleSink):
                query.sink.display = view.show_batch
    run = Run(spark, plan, on_started=view.attach if view else None)

    def on_interrupt(signum, frame):  # noqa: ARG001
        if run.stop_requested.is_set():
            run.force_stop.set()
        run.stop_requested.set()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    try:
        run.start()
        errors.print(f"running {plan.job.name} from {plan.source.describe()}: "
                     + ", ".join(f"{q.output.name} -> {q.sink.describe()} ({q.mode})" for q in plan.queries),
                     soft_wrap=True)
        summary = run.wait()
    finally:
        if view is not None:
            view.close()
        signal.signal(signal.SIGINT, previous)
        run.cleanup()
    console.print(summary_table(summary))
    if not plan.temporary_state:
        console.print(f"state kept in {Path(plan.state_dir)}: the same command resumes from it")
    return summary
