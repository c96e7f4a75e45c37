"""What ``speedlayer produce`` does once its plan is valid: start Spark, publish, show progress, summarise."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from speedlayer.producers.produce import ProducePlan, ProduceSettings, ProduceSummary, iso_millis, produce
from speedlayer.runtime.session import build_session, check_java


def execute_produce(plan: ProducePlan, settings: ProduceSettings, show_progress: bool,
                    console: Console, errors: Console) -> ProduceSummary:
    """Publish the plan's events; prints the pinned start and the matching generator URI first."""
    check_java()
    span = f"events {plan.first:,} .. {plan.end - 1:,}" if plan.end is not None else f"events from {plan.first:,} on"
    pace = f"at {plan.pace:,} events/s" if plan.pace else "as fast as possible"
    console.print(f"producing {span} to {plan.destination.describe()}, {pace}", soft_wrap=True, markup=False)
    console.print(f"start {iso_millis(plan.start_ms)} ({plan.start_ms}); event n equals event n of "
                  f"{plan.generator_uri()}", soft_wrap=True, markup=False)
    log_file = Path(tempfile.gettempdir()) / "speedlayer-produce-spark.log"
    errors.print(f"starting Spark ({settings.master}); Spark's log: {log_file}", soft_wrap=True, markup=False)
    spark = build_session(settings.master, {"spark.ui.enabled": "false"}, app_name="speedlayer-produce", log_file=log_file,
                          announce=lambda line: errors.print(f"note: {line}", soft_wrap=True, markup=False))
    try:
        if show_progress:
            columns = [TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[speed]}"),
                       TimeElapsedColumn()]
            with Progress(*columns, console=errors, transient=True) as bar:
                task = bar.add_task("produce", total=plan.total, speed="")

                def on_progress(sent: int, seconds: float) -> None:
                    bar.update(task, completed=sent, speed=f"{sent / seconds:,.0f}/s" if seconds > 0 else "")

                summary = produce(spark, plan, on_progress)
        else:
            summary = produce(spark, plan)
    finally:
        spark.stop()
    last = f", last event {summary.first + summary.events - 1:,}" if summary.events else ""
    console.print(f"produced {summary.events:,} events in {summary.elapsed_s:,.1f}s ({summary.rate:,.0f}/s){last}, "
                  f"after {summary.startup_s:,.1f}s computing the first chunk; stopped by {summary.stopped_by}",
                  soft_wrap=True, markup=False)
    return summary
