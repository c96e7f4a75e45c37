"""The ``speedlayer`` command: run a job, list jobs.

    speedlayer run fleet --source 'generator://?rate=20000&seed=7' --sink windows=parquet:out/windows
    speedlayer jobs
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer
from typer._click import exceptions as click  # Typer (pinned) vendors click's exceptions
from rich.console import Console

from speedlayer import __version__
from speedlayer.config import build_settings, load_yaml, output_modes, pairs
from speedlayer.errors import SpeedlayerError

app = typer.Typer(
    name="speedlayer",
    help="Real-time stream processing on Spark Structured Streaming.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
err = Console(stderr=True, highlight=False)
out = Console(highlight=False)


@app.command("jobs")
def jobs_command() -> None:
    """List the jobs, one line each, with their outputs."""
    from speedlayer.pipelines import JOBS

    for job in JOBS.values():
        out.print(f"{job.name:<12} {job.summary} (outputs: {', '.join(job.outputs)}; default source: {job.default_source})",
                  soft_wrap=True, markup=False)


@app.command("run")
def run_command(
    job: str = typer.Argument(..., help="job to run (see 'speedlayer jobs')"),
    source: Optional[str] = typer.Option(None, "--source", help="source URI, e.g. generator://?rate=5000 or files:///landing"),
    sink: Optional[List[str]] = typer.Option(None, "--sink", help="NAME=URI, e.g. windows=parquet:out/windows (repeatable)"),
    trigger: Optional[str] = typer.Option(None, "--trigger", help="processing:5s | available-now | once | continuous:1s | realtime:5min (Kafka)"),
    output_mode: Optional[List[str]] = typer.Option(None, "--output-mode", help="MODE or NAME=MODE: append | update | complete"),
    watermark: Optional[str] = typer.Option(None, "--watermark", help="event-time watermark delay (default 5s)"),
    window: Optional[str] = typer.Option(None, "--window", help="tumbling window length (default 10s)"),
    slide: Optional[str] = typer.Option(None, "--slide", help="slide of the sliding windows (default 10s)"),
    sliding_window: Optional[str] = typer.Option(None, "--sliding-window", help="length of the sliding windows (default 1min)"),
    zones: Optional[str] = typer.Option(None, "--zones", help="speed-limit zones CSV (default: the built-in table)"),
    state_dir: Optional[str] = typer.Option(None, "--state-dir", help="checkpoints live here; a restart resumes from it"),
    duration: Optional[float] = typer.Option(None, "--duration", help="stop gracefully after this many seconds"),
    max_events: Optional[int] = typer.Option(None, "--max-events", help="process exactly N generated events, then exit"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])"),
    conf: Optional[List[str]] = typer.Option(None, "--conf", help="key=value Spark setting (repeatable)"),
    option: Optional[List[str]] = typer.Option(None, "--option", help="KEY=VALUE job option, e.g. lowercase=false (repeatable)"),
    config: Optional[str] = typer.Option(None, "--config", help="YAML file with the same settings; flags win"),
    live: Optional[bool] = typer.Option(None, "--live/--no-live", help="redraw a live view (default: on a terminal)"),
) -> None:
    """Run JOB from a source into sinks until stopped (Ctrl-C), --duration, or --max-events."""
    if duration is not None and max_events is not None:
        raise click.UsageError("give --duration or --max-events, not both")
    flags = {
        "job": job, "source": source, "sinks": pairs(sink, "--sink", "NAME=URI"), "trigger": trigger,
        "output_mode": output_modes(output_mode), "watermark": watermark, "window": window, "slide": slide,
        "sliding_window": sliding_window, "zones": zones, "state_dir": state_dir, "duration": duration,
        "max_events": max_events, "master": master, "conf": pairs(conf, "--conf", "key=value"),
        "options": pairs(option, "--option", "KEY=VALUE"),
    }
    settings = build_settings(load_yaml(config) if config else {}, flags)
    from speedlayer.run_command import execute

    execute(settings, live=sys.stdout.isatty() if live is None else live, console=out, errors=err)


@app.command("produce")
def produce_command(
    to: str = typer.Option(..., "--to", help="redis://host:6379/0?stream=vehicles&shards=4 | files:///landing | kafka://host:9092/topic"),
    rate: Optional[int] = typer.Option(None, "--rate", help="events per second, 0 = as fast as possible (default: the generator's rate)"),
    max_events: Optional[int] = typer.Option(None, "--max-events", help="publish N events, then exit (default: until Ctrl-C)"),
    generator: str = typer.Option("generator://", "--generator", help="generator options, e.g. 'generator://?seed=7&vehicles=500'"),
    seed: Optional[int] = typer.Option(None, "--seed", help="generator seed (wins over --generator's)"),
    start: Optional[str] = typer.Option(None, "--start", help="event-time origin, ISO-8601 or epoch ms (default: now)"),
    from_event: int = typer.Option(0, "--from-event", help="first event number n (to continue an earlier run)"),
    chunk: int = typer.Option(50_000, "--chunk", help="events computed per Spark job"),
    master: str = typer.Option("local[*]", "--master", help="Spark master that computes the events"),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="progress bar (default: on a terminal)"),
) -> None:
    """Publish the generator's events to Redis Streams, a landing directory or Kafka."""
    from pydantic import ValidationError

    from speedlayer.produce import ProduceSettings, plan_produce

    try:
        settings = ProduceSettings(to=to, generator=generator, rate=rate, max_events=max_events, seed=seed, start=start,
                                   from_event=from_event, chunk=chunk, master=master)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise click.UsageError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    plan = plan_produce(settings)
    plan.destination.check()
    from speedlayer.produce_command import execute_produce

    execute_produce(plan, settings, err.is_terminal if progress is None else progress, out, err)


@app.command("train")
def train_command(
    job: str = typer.Argument(..., help="the job whose model to fit: fraud"),
    model: str = typer.Option("models/fraud", "--model", help="directory to save the model in (replaced)"),
    generator: str = typer.Option("generator://?kind=transactions", "--generator",
                                  help="labelled history: a generator://?kind=transactions URI (seed, cards, fraud)"),
    events: int = typer.Option(100_000, "--events", min=1000, help="transactions of history to fit on"),
    holdout: int = typer.Option(20_000, "--holdout", min=100, help="later transactions held out to measure precision/recall"),
    threshold: float = typer.Option(0.5, "--threshold", min=0.0, max=1.0, help="alert threshold the held-out figures are for"),
    master: str = typer.Option("local[*]", "--master", help="Spark master that trains"),
) -> None:
    """Fit a job's model in batch on generated history and save it (fraud: Spark ML pipeline + card profiles)."""
    if job != "fraud":
        raise click.UsageError(f"no model to train for job {job!r}: only 'fraud' has one")
    import tempfile
    from pathlib import Path

    from speedlayer.fraud_model import train
    from speedlayer.session import build_session, check_java
    from speedlayer.sources.generator import GeneratorSource
    from speedlayer.uris import parse_uri

    if GeneratorSource(parse_uri(generator, "--generator URI")).options.kind != "transactions":
        raise click.UsageError("--generator must generate transactions: add kind=transactions")
    check_java()
    log_file = Path(tempfile.gettempdir()) / "speedlayer-train-spark.log"
    err.print(f"starting Spark ({master}); Spark's log: {log_file}", soft_wrap=True, markup=False)
    spark = build_session(master, {"spark.ui.enabled": "false"}, app_name="speedlayer-train", log_file=log_file)
    try:
        meta = train(spark, model, generator, events, holdout, threshold)
    finally:
        spark.stop()
    h = meta["holdout"]
    out.print(f"trained on {meta['history']['transactions']:,} transactions ({meta['history']['frauds']:,} fraud, "
              f"{meta['history']['cards']:,} card profiles) in {meta['seconds']}s; saved to {Path(model).resolve()}",
              soft_wrap=True, markup=False)
    out.print(f"held out {h['transactions']:,} later transactions ({h['frauds']:,} fraud): at threshold {h['threshold']:g} "
              f"precision {h['precision']:.3f}, recall {h['recall']:.3f}, ROC AUC {h['roc_auc']:.3f}",
              soft_wrap=True, markup=False)


@app.command("version")
def version_command() -> None:
    """Print speedlayer's version."""
    out.print(f"speedlayer {__version__}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes exit 2 with one line, no traceback."""
    try:
        app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("stopped")
        sys.exit(130)
    except click.NoArgsIsHelpError as exc:
        out.print(exc.format_message(), soft_wrap=True)
        sys.exit(0)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        err.print(f"error: {exc.format_message()}{hint}", soft_wrap=True)
        sys.exit(2)
    except SpeedlayerError as exc:
        err.print(f"error: {exc}", soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
