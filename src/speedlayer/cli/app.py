"""The ``speedlayer`` command: run a job, produce events, measure (bench, advise), list jobs.

    speedlayer run fleet --source 'generator://?rate=20000&seed=7' --sink windows=parquet:out/windows
    speedlayer jobs
"""

from __future__ import annotations

import dataclasses
import os
import sys

import typer
from rich.console import Console
from typer._click import exceptions as click  # Typer (pinned) vendors click's exceptions

from speedlayer import __version__
from speedlayer.core.errors import SpeedlayerError
from speedlayer.runtime.settings import build_settings, load_yaml, output_modes, pairs

app = typer.Typer(
    name="speedlayer",
    help="Real-time stream processing on Spark Structured Streaming.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
err = Console(stderr=True, highlight=False)
# Piped into a file, rich would fold wide tables (bench, jobs) into 80 columns; COLUMNS still wins.
out = Console(highlight=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)


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
    source: str | None = typer.Option(None, "--source", help="source URI, e.g. generator://?rate=5000 or files:///landing"),
    sink: list[str] | None = typer.Option(None, "--sink", help="NAME=URI, e.g. windows=parquet:out/windows (repeatable)"),
    trigger: str | None = typer.Option(None, "--trigger",
                                       help="processing:5s | available-now | once | continuous:1s | realtime:5min (Kafka)"),
    output_mode: list[str] | None = typer.Option(None, "--output-mode", help="MODE or NAME=MODE: append | update | complete"),
    watermark: str | None = typer.Option(None, "--watermark", help="event-time watermark delay (default 5s)"),
    max_ahead: str | None = typer.Option(None, "--max-ahead",
                                         help="an event time further ahead of its ingest time is a dead "
                                              "letter (default: a fifth of --watermark, at least 1s)"),
    dedup: str | None = typer.Option(None, "--dedup",
                                     help="which copy of a re-sent event counts: exact (default: the lowest offset, the same "
                                          "on every replay and cluster) | fast (the first Spark meets; ~10% more throughput)"),
    allowed_lateness: str | None = typer.Option(None, "--allowed-lateness",
                                                help="fleet: re-emit a closed window corrected "
                                                     "by events up to this late (default off)"),
    window: str | None = typer.Option(None, "--window", help="tumbling window length (default 10s)"),
    slide: str | None = typer.Option(None, "--slide", help="slide of the sliding windows (default 10s)"),
    sliding_window: str | None = typer.Option(None, "--sliding-window", help="length of the sliding windows (default 1min)"),
    zones: str | None = typer.Option(None, "--zones", help="speed-limit zones CSV (default: the built-in table)"),
    # --- trips, count windows (state-windows) ---
    trip_gap: str | None = typer.Option(None, "--trip-gap",
                                        help="trips: a trip ends after this long without a ping (default 5min)"),
    max_trip: str | None = typer.Option(None, "--max-trip",
                                        help="trips: cut a trip at every multiple of this since "
                                             "the epoch, so state stays bounded (default 1h)"),
    count_window: int | None = typer.Option(None, "--count-window", help="count-windows: pings per window (default 20)"),
    # --- end state-windows ---
    state_dir: str | None = typer.Option(None, "--state-dir", help="checkpoints live here; a restart resumes from it"),
    allow_changed_settings: bool | None = typer.Option(None, "--allow-changed-settings",
                                                       help="resume from --state-dir even though "
                                                            "settings that change results differ"),
    duration: float | None = typer.Option(None, "--duration", help="stop gracefully after this many seconds"),
    max_events: int | None = typer.Option(None, "--max-events", help="process exactly N generated events, then exit"),
    master: str | None = typer.Option(None, "--master", help="Spark master (default local[*])"),
    spark_ui: str | None = typer.Option(None, "--spark-ui",
                                        help="Spark's UI: local (default: 127.0.0.1 only, "
                                             "kill links off) | off | open (every interface)"),
    ship: str | None = typer.Option(None, "--ship",
                                    help="cluster masters: what executors get: auto (default: speedlayer "
                                         "and its Python packages, packed) | none | PATH of an archive"),
    conf: list[str] | None = typer.Option(None, "--conf", help="key=value Spark setting (repeatable)"),
    option: list[str] | None = typer.Option(None, "--option", help="KEY=VALUE job option, e.g. lowercase=false (repeatable)"),
    config: str | None = typer.Option(None, "--config", help="YAML file with the same settings; flags win"),
    live: bool | None = typer.Option(None, "--live/--no-live", help="redraw a live view (default: on a terminal)"),
    dashboard: bool | None = typer.Option(None, "--dashboard/--no-dashboard",
                                          help="serve the web dashboard and /metrics (default: with the live view)"),
    dashboard_port: int | None = typer.Option(None, "--dashboard-port",
                                              help="dashboard port (default 8765; a port given here must be free)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address the dashboard and metrics bind to"),
    metrics_port: int | None = typer.Option(None, "--metrics-port", help="also serve Prometheus /metrics alone on this port"),
    # --- speeding incidents (issue 4: incidents) ---
    incident_after: str | None = typer.Option(None, "--incident-after",
                                              help="above the limit this long opens an incident (default 10s)"),
    incident_timeout: str | None = typer.Option(None, "--incident-timeout",
                                                help="a vehicle silent this long closes its incident (default 30s)"),
    incident_updates: bool | None = typer.Option(None, "--incident-updates/--no-incident-updates",
                                                 help="also emit open incidents as they change (needs update mode)"),
    incident_initial_state: str | None = typer.Option(None, "--incident-initial-state",
                                                      help="Parquet/CSV table of open incidents to start from"),
    # --- ride matching ---
    rides: str | None = typer.Option(None, "--rides",
                                     help="matches: source URI of the ride requests (default "
                                          "with a generator source: the generator's kind=rides)"),
    match_within: str | None = typer.Option(None, "--match-within",
                                            help="matches: a ping this close to the request time, either side (default 10s)"),
    match_cell: float | None = typer.Option(None, "--match-cell",
                                            help="matches: grid cell size in metres, and the farthest "
                                                 "a matching ping is from the pickup (default 500)"),
) -> None:
    """Run JOB from a source into sinks until stopped (Ctrl-C), --duration, or --max-events."""
    if duration is not None and max_events is not None:
        raise click.UsageError("give --duration or --max-events, not both")
    flags = {
        "job": job, "source": source, "sinks": pairs(sink, "--sink", "NAME=URI"), "trigger": trigger,
        "output_mode": output_modes(output_mode), "watermark": watermark, "max_ahead": max_ahead,
        "dedup": dedup, "allowed_lateness": allowed_lateness, "window": window, "slide": slide,
        "sliding_window": sliding_window, "zones": zones, "state_dir": state_dir, "duration": duration,
        "max_events": max_events, "master": master, "conf": pairs(conf, "--conf", "key=value"),
        "trip_gap": trip_gap, "max_trip": max_trip, "count_window": count_window,  # state-windows
        # --- speeding incidents (issue 4: incidents) ---
        "incident_after": incident_after, "incident_timeout": incident_timeout, "incident_updates": incident_updates,
        "incident_initial_state": incident_initial_state,
        "rides": rides, "match_within": match_within, "match_cell": match_cell,  # ride matching
        "options": pairs(option, "--option", "KEY=VALUE"),
        "allow_changed_settings": allow_changed_settings,
        "spark_ui": spark_ui, "ship": ship,
    }
    settings = build_settings(load_yaml(config) if config else {}, flags)
    from speedlayer.cli.run import Surfaces, execute

    for flag, port in (("--dashboard-port", dashboard_port), ("--metrics-port", metrics_port)):
        if port is not None and not 0 < port < 65536:
            raise click.UsageError(f"{flag} {port} is not a port: give 1-65535")
    live = sys.stdout.isatty() if live is None else live
    wants_dashboard = (live or dashboard_port is not None) if dashboard is None else dashboard
    surfaces = Surfaces(wants_dashboard, dashboard_port, host, metrics_port)
    execute(settings, live=live, console=out, errors=err, surfaces=surfaces)


@app.command("produce")
def produce_command(
    to: str = typer.Option(..., "--to",
                           help="redis://host:6379/0?stream=vehicles&shards=4 | files:///landing | kafka://host:9092/topic"),
    rate: int | None = typer.Option(None, "--rate",
                                    help="events per second, 0 = as fast as possible (default: the generator's rate)"),
    max_events: int | None = typer.Option(None, "--max-events", help="publish N events, then exit (default: until Ctrl-C)"),
    generator: str = typer.Option("generator://", "--generator",
                                  help="generator options, e.g. 'generator://?seed=7&vehicles=500'"),
    seed: int | None = typer.Option(None, "--seed", help="generator seed (wins over --generator's)"),
    kind: str | None = typer.Option(None, "--kind", help="vehicles | actions | transactions | rides (wins over --generator's)"),
    start: str | None = typer.Option(None, "--start", help="event-time origin, ISO-8601 or epoch ms (default: now)"),
    from_event: int = typer.Option(0, "--from-event", help="first event number n (to continue an earlier run)"),
    chunk: int = typer.Option(50_000, "--chunk", help="events computed per Spark job"),
    master: str = typer.Option("local[*]", "--master", help="Spark master that computes the events"),
    progress: bool | None = typer.Option(None, "--progress/--no-progress", help="progress bar (default: on a terminal)"),
) -> None:
    """Publish the generator's events to Redis Streams, a landing directory or Kafka."""
    from pydantic import ValidationError

    from speedlayer.producers.produce import ProduceSettings, plan_produce

    try:
        settings = ProduceSettings(to=to, generator=generator, rate=rate, max_events=max_events, seed=seed, kind=kind,
                                   start=start, from_event=from_event, chunk=chunk, master=master)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise click.UsageError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    plan = plan_produce(settings)
    plan.destination.check()
    from speedlayer.cli.produce import execute_produce

    execute_produce(plan, settings, err.is_terminal if progress is None else progress, out, err)


@app.command("bench")
def bench_command(
    out_dir: str = typer.Option("bench-out", "--out", help="directory for bench.json and the PNG plots"),
    quick: bool = typer.Option(False, "--quick",
                               help="one small rate (2,000/s), 3 s cells, 2 s windows: "
                                    "every trigger in under 3 minutes on 2 idle cores"),
    output: list[str] | None = typer.Option(None, "--output", help="windows | alerts (repeatable; default both)"),
    mode: list[str] | None = typer.Option(None, "--mode",
                                          help="trigger to measure (repeatable; default: processing:0s, processing:100ms, "
                                               "processing:1s, processing:5s, available-now, continuous:1s, realtime:)"),
    rate: list[int] | None = typer.Option(None, "--rate", help="input rate in events/s (repeatable)"),
    cell_seconds: float | None = typer.Option(None, "--cell-seconds", help="how long each cell feeds events"),
    warmup_seconds: float | None = typer.Option(None, "--warmup-seconds", help="first seconds of a cell not measured"),
    window: str | None = typer.Option(None, "--window", help="tumbling window of the windows output (default 10s; --quick 2s)"),
    watermark: str | None = typer.Option(None, "--watermark", help="watermark delay (default 5s; --quick 1s)"),
    schedule_seconds: float | None = typer.Option(None, "--schedule-seconds", help="available-now: a run every N seconds"),
    master: str | None = typer.Option(None, "--master", help="Spark master (default local[2])"),
) -> None:
    """Measure end-to-end latency, sustained throughput, CPU and memory per output, trigger and input rate."""
    from speedlayer.bench.lab import LabConfig

    cfg = LabConfig.quick() if quick else LabConfig()
    given = {"outputs": tuple(output or ()), "modes": tuple(mode or ()), "rates": tuple(rate or ()),
             "cell_s": cell_seconds, "warmup_s": warmup_seconds, "window": window, "watermark": watermark,
             "schedule_s": schedule_seconds, "master": master}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in given.items() if v not in (None, ())})
    cfg.check()
    from pathlib import Path

    from speedlayer.bench.command import execute_bench

    execute_bench(cfg, Path(out_dir), out, err)


@app.command("advise")
def advise_command(
    rate: int = typer.Option(..., "--rate", help="target input rate, events/s"),
    latency: str | None = typer.Option(None, "--latency", help="target end-to-end latency, e.g. 500ms or 2s"),
    output: str = typer.Option("windows", "--output", help="windows | alerts"),
    headroom: float = typer.Option(0.7, "--headroom", help="share of the interval a batch may take (0-1]"),
    from_json: str | None = typer.Option(None, "--from", help="fit the batch cost from a bench.json instead of measuring"),
    size: list[int] | None = typer.Option(None, "--size",
                                          help="events per batch to measure (repeatable; default 5000, 20000, 60000)"),
    batches: int = typer.Option(3, "--batches", help="measured batches per size"),
    window: str = typer.Option("10s", "--window", help="tumbling window of the windows output"),
    watermark: str = typer.Option("5s", "--watermark", help="watermark delay"),
    out_dir: str | None = typer.Option(None, "--out", help="also draw time per batch vs batch size into this directory"),
    master: str = typer.Option("local[2]", "--master", help="Spark master"),
) -> None:
    """Recommend a trigger interval and maxRecordsPerTrigger for a target rate, and the modes that meet a latency."""
    from pathlib import Path

    from speedlayer.core.durations import positive_duration

    if output not in ("windows", "alerts"):
        raise click.UsageError(f"--output {output!r}: choose windows or alerts")
    if not 0 < headroom <= 1:
        raise click.UsageError("--headroom is the share of the interval a batch may take: between 0 and 1")
    if rate <= 0 or batches <= 0 or any(s <= 0 for s in size or ()):
        raise click.UsageError("--rate, --batches and --size must be above zero")
    latency_ms = positive_duration(latency, "--latency") if latency else None
    sizes = list(size or (5_000, 20_000, 60_000))
    if from_json is None and len(set(sizes)) < 2:
        raise click.UsageError("give at least two different --size values to fit a batch cost")
    from speedlayer.bench.command import execute_advise

    execute_advise(rate, latency_ms, output, headroom, Path(from_json) if from_json else None, sizes, batches,
                   window, watermark, master, Path(out_dir) if out_dir else None, out, err)


@app.command("status")
def status_command(
    state_dir: str = typer.Option(..., "--state-dir", help="the --state-dir of a run (or one query's checkpoint)"),
    operators: bool = typer.Option(True, "--operators/--no-operators",
                                   help="describe stateful operators with Spark's state-metadata source (starts Spark)"),
) -> None:
    """Each query's last committed batch, offsets and watermark, read from the checkpoints (running or stopped),
    and the run's executors."""
    import tempfile
    from pathlib import Path

    from speedlayer.monitor.executors import status_lines
    from speedlayer.monitor.status import add_operators, compact, find_checkpoints, iso

    statuses = find_checkpoints(Path(state_dir))
    if operators and any(s.stateful for s in statuses):
        from speedlayer.runtime.session import build_session, check_java

        check_java()
        spark = build_session("local[1]", {"spark.ui.enabled": "false"}, app_name="speedlayer-status",
                              log_file=Path(tempfile.gettempdir()) / "speedlayer-status-spark.log")
        try:
            add_operators(spark, statuses)
        finally:
            spark.stop()
    for s in statuses:
        committed = "none" if s.last_committed is None else str(s.last_committed)
        pending = f" (batch {s.last_planned} planned, not committed)" if s.last_planned != s.last_committed else ""
        out.print(f"{s.name}: last committed batch {committed}{pending}, batch time {iso(s.batch_time_ms) or '-'}, "
                  f"watermark {s.watermark or '-'}", soft_wrap=True, markup=False, highlight=False)
        out.print(f"  offsets: {compact(s.offsets, 400) or '-'}", soft_wrap=True, markup=False, highlight=False)
        for op in s.operators:
            if "error" in op:
                out.print(f"  state metadata unavailable: {op['error']}", soft_wrap=True, markup=False)
            else:
                out.print(f"  operator {op.get('operatorId')} {op.get('operatorName')} store {op.get('stateStoreName')}, "
                          f"{op.get('numPartitions')} partitions, batches {op.get('minBatchId')}..{op.get('maxBatchId')}",
                          soft_wrap=True, markup=False)
    for line in status_lines(Path(state_dir)):  # recorded by the run: executors alive, cores, lost
        out.print(line, soft_wrap=True, markup=False, highlight=False)


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

    from speedlayer.core.uris import parse_uri
    from speedlayer.pipelines.fraud.model import train
    from speedlayer.runtime.session import build_session, check_java
    from speedlayer.sources.generator import GeneratorSource

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
