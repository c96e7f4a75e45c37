"""``speedlayer run``: the flags and config file become RunSettings; ``speedlayer.cli.running`` runs them."""

from __future__ import annotations

import sys

import typer
from typer._click import exceptions as click  # Typer (pinned) vendors click's exceptions

from speedlayer.cli.console import err, out
from speedlayer.runtime.settings import build_settings, load_yaml, output_modes, pairs


def run_command(
    job: str | None = typer.Argument(None, help="job to run (see 'speedlayer jobs'), or a job file (.yaml, .yml)"),
    job_file: str | None = typer.Option(None, "--job-file",
                                        help="YAML job file: schema, watermark, outputs as Spark SQL (docs/job-files.md)"),
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
    """Run JOB (or a job file) from a source into sinks until stopped (Ctrl-C), --duration, or --max-events."""
    if duration is not None and max_events is not None:
        raise click.UsageError("give --duration or --max-events, not both")
    job, job_file = job_and_file(job, job_file)
    flags = {
        "job": job, "job_file": job_file, "source": source, "sinks": pairs(sink, "--sink", "NAME=URI"), "trigger": trigger,
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
    from speedlayer.cli.running import Surfaces, execute

    for flag, port in (("--dashboard-port", dashboard_port), ("--metrics-port", metrics_port)):
        if port is not None and not 0 < port < 65536:
            raise click.UsageError(f"{flag} {port} is not a port: give 1-65535")
    live = sys.stdout.isatty() if live is None else live
    wants_dashboard = (live or dashboard_port is not None) if dashboard is None else dashboard
    surfaces = Surfaces(wants_dashboard, dashboard_port, host, metrics_port)
    execute(settings, live=live, console=out, errors=err, surfaces=surfaces)


def job_and_file(job: str | None, job_file: str | None) -> tuple[str | None, str | None]:
    """The JOB argument and --job-file, a JOB that ends in .yaml or .yml being a job file.

    >>> job_and_file("orders.yaml", None), job_and_file("fleet", None)
    ((None, 'orders.yaml'), ('fleet', None))
    """
    if job is not None and job_file is not None:
        raise click.UsageError(f"give a JOB or --job-file, not both (got {job!r} and --job-file {job_file!r})")
    if job is not None and job.lower().endswith((".yaml", ".yml")):
        return None, job
    return job, job_file
