"""``speedlayer run``: the flags and config file become RunSettings; ``speedlayer.cli.running`` runs them.

The flags here are the generic run settings; a job's own settings (the fleet's ``--trip-gap``,
``--rides``, a user's job's options) are flags of their own too, read by ``speedlayer.cli.job_flags``
once the job is known, and listed by ``speedlayer run JOB --help``.
"""

from __future__ import annotations

import sys

import typer

from speedlayer.cli.console import err, out
from speedlayer.cli.job_help import JobHelpCommand
from speedlayer.core.errors import ConfigError, SpeedlayerError
from speedlayer.runtime.settings import build_settings, load_yaml, output_modes, pairs

_O = typer.Option
ONE_QUERY_HELP = ("write the outputs in append mode whose sinks are console:, databases or redis: from one shared query "
                  "(<job>_shared): one batch and one watermark for all of them; the others keep queries of their own")


def run_command(
    ctx: typer.Context,
    job: str | None = typer.Argument(None, help="job to run: a name (see 'speedlayer jobs'), MODULE:ATTRIBUTE, or a job "
                                                "file (.yaml, .yml) (default: job: in --config)"),
    job_file: str | None = _O(None, "--job-file", help="YAML job file: schema, watermark, outputs as Spark SQL"),
    source: str | None = _O(None, "--source", help="source URI, e.g. generator://?rate=5000 or files:///landing"),
    sink: list[str] | None = _O(None, "--sink", help="NAME=URI, e.g. windows=parquet:out/windows (repeatable)"),
    trigger: str | None = _O(None, "--trigger", help="processing:5s | available-now | once | continuous:1s | realtime:5min"),
    output_mode: list[str] | None = _O(None, "--output-mode", help="MODE or NAME=MODE: append | update | complete"),
    watermark: str | None = _O(None, "--watermark", help="event-time watermark delay (default 5s)"),
    max_ahead: str | None = _O(None, "--max-ahead", help="an event time further ahead of its ingest time is a dead "
                                                         "letter (default: a fifth of --watermark, at least 1s)"),
    dedup: str | None = _O(None, "--dedup", help="which copy of a re-sent event counts: exact (default: the lowest offset, "
                                                 "the same on every replay) | fast (the first Spark meets; ~10% faster)"),
    window: str | None = _O(None, "--window", help="tumbling window length (default 10s)"),
    slide: str | None = _O(None, "--slide", help="slide of the sliding windows (default 10s)"),
    sliding_window: str | None = _O(None, "--sliding-window", help="length of the sliding windows (default 1min)"),
    state_dir: str | None = _O(None, "--state-dir", help="checkpoints live here; a restart resumes from it"),
    allow_changed_settings: bool | None = _O(None, "--allow-changed-settings",
                                             help="resume from --state-dir even though settings that change results differ"),
    one_query: bool | None = _O(None, "--one-query", help=ONE_QUERY_HELP),
    duration: str | None = _O(None, "--duration", help="stop gracefully after: 90s, 5min, 2h (a bare number is seconds)"),
    max_events: int | None = _O(None, "--max-events", help="process exactly N generated events, then exit"),
    master: str | None = _O(None, "--master", help="Spark master (default local[*])"),
    spark_ui: str | None = _O(None, "--spark-ui", help="Spark's UI: local (default: 127.0.0.1 only, kill links off) | off "
                                                       "| open (every interface)"),
    ship: str | None = _O(None, "--ship", help="cluster masters: what executors get: auto (default: speedlayer and its "
                                               "Python packages, packed) | none | PATH of an archive"),
    max_state_memory: str | None = _O(None, "--max-state-memory", help="RocksDB's memory for all state stores together: "
                                                                       "512m, 1g (default 500m)"),
    retain_batches: int | None = _O(None, "--retain-batches", help="batches each checkpoint keeps for a restart "
                                                                   "(default 20; Spark's 100)"),
    max_checkpoint_size: str | None = _O(None, "--max-checkpoint-size", help="warn once when the checkpoints pass this "
                                                                             "size on disk: 2g (default: off)"),
    conf: list[str] | None = _O(None, "--conf", help="key=value Spark setting (repeatable)"),
    option: list[str] | None = _O(None, "--option", help="KEY=VALUE job option, e.g. lowercase=false (repeatable)"),
    input_: list[str] | None = _O(None, "--input", help="NAME=URI source of a job's second stream, e.g. rides=redis://..."),
    config: str | None = _O(None, "--config", help="YAML file with the same settings; flags win"),
    live: bool | None = _O(None, "--live/--no-live", help="redraw a live view (default: on a terminal)"),
    dashboard: bool | None = _O(None, "--dashboard/--no-dashboard", help="serve the web dashboard and /metrics "
                                                                         "(default: with the live view)"),
    dashboard_port: int | None = _O(None, "--dashboard-port", help="dashboard port (default 8765; a port given must be free)"),
    host: str = _O("127.0.0.1", "--host", help="address the dashboard, metrics and SQL endpoint bind to"),
    metrics_port: int | None = _O(None, "--metrics-port", help="also serve Prometheus /metrics alone on this port"),
    sql: bool = _O(True, "--sql/--no-sql", help="serve ad-hoc SQL over the live job (speedlayer sql, notebooks: "
                                                 "Spark Connect, with a token)"),
    sql_port: int | None = _O(None, "--sql-port", help="the SQL endpoint's port (default: a free one)"),
) -> None:
    """Run JOB (or a job file) from a source into sinks until stopped (Ctrl-C), --duration, or --max-events."""
    settings = build_settings(*_settings_given(ctx))
    live = sys.stdout.isatty() if live is None else live
    surfaces = _surfaces(live, dashboard, dashboard_port, host, metrics_port, sql, sql_port)
    from speedlayer.cli.running import execute

    execute(settings, live=live, console=out, errors=err, surfaces=surfaces)


#: flags that are run settings of the same name, as given
_AS_GIVEN = ("source", "trigger", "watermark", "max_ahead", "dedup", "window", "slide", "sliding_window", "state_dir",
             "duration", "max_events", "master", "allow_changed_settings", "spark_ui", "ship", "one_query",
             "max_state_memory", "retain_batches", "max_checkpoint_size")


def _settings_given(ctx: typer.Context) -> tuple[dict, dict]:
    """What ``--config`` holds and what the flags (the run's and the job's own) say, for ``build_settings``."""
    given = ctx.params
    if given["duration"] is not None and given["max_events"] is not None:
        raise ConfigError("give --duration or --max-events, not both")
    job, job_file = job_and_file(given["job"], given["job_file"])
    file_values = load_yaml(given["config"]) if given["config"] else {}
    options, inputs = _job_flags(job or file_values.get("job"), job_file or file_values.get("job_file"), ctx)
    flags = {name: given[name] for name in _AS_GIVEN}
    flags.update(job=job, job_file=job_file, sinks=pairs(given["sink"], "--sink", "NAME=URI"),
                 output_mode=output_modes(given["output_mode"]), conf=pairs(given["conf"], "--conf", "key=value"),
                 options={**options, **pairs(given["option"], "--option", "KEY=VALUE")},
                 inputs={**inputs, **pairs(given["input_"], "--input", "NAME=URI")})
    return file_values, flags


def _surfaces(live: bool, dashboard: bool | None, dashboard_port: int | None, host: str, metrics_port: int | None,
              sql: bool = False, sql_port: int | None = None):
    """Where the run shows itself: the dashboard by default with the live view, the SQL endpoint, ports checked."""
    from speedlayer.cli.running import Surfaces

    for flag, port in (("--dashboard-port", dashboard_port), ("--metrics-port", metrics_port), ("--sql-port", sql_port)):
        if port is not None and not 0 < port < 65536:
            raise ConfigError(f"{flag} {port} is not a port: give 1-65535")
    wants_dashboard = (live or dashboard_port is not None) if dashboard is None else dashboard
    return Surfaces(wants_dashboard, dashboard_port, host, metrics_port, sql, sql_port)


def job_and_file(job: str | None, job_file: str | None) -> tuple[str | None, str | None]:
    """The JOB argument and --job-file, a JOB that ends in .yaml or .yml being a job file.

    >>> job_and_file("orders.yaml", None), job_and_file("fleet", None)
    ((None, 'orders.yaml'), ('fleet', None))
    """
    if job is not None and job_file is not None:
        raise ConfigError(f"give a JOB or --job-file, not both (got {job!r} and --job-file {job_file!r})")
    if job is not None and job.lower().endswith((".yaml", ".yml")):
        return None, job
    return job, job_file


def _job_flags(job: str | None, job_file: str | None, ctx: typer.Context) -> tuple[dict[str, str], dict[str, str]]:
    """The job's own options and inputs given as flags (``--trip-gap 10min``, ``--rides URI``)."""
    if job is None and job_file is None:
        raise ConfigError("name the job to run: speedlayer run JOB (see 'speedlayer jobs'), a job file, "
                               "or job: in --config")
    if not ctx.args:
        return {}, {}
    from speedlayer.cli.job_flags import parse_job_flags

    run_flags = [o for p in ctx.command.params for o in p.opts]
    return parse_job_flags(ctx.args, _resolve(job, job_file), run_flags)


def _resolve(job: str | None, job_file: str | None):
    from speedlayer.pipelines import get_job
    from speedlayer.pipelines.job_file import load_job_file

    return load_job_file(str(job_file)) if job_file else get_job(str(job))


class RunCommand(JobHelpCommand):
    """``speedlayer run``, whose ``--help`` also lists the named job's own flags (``run fleet --help``)."""

    unnamed = "each job's own options are flags too: 'speedlayer run JOB --help' lists them"

    def named_job(self, name: str):
        return _named_job(name)

    def job_flags(self, job) -> tuple[str, dict, str]:
        from speedlayer.cli.job_flags import job_flags

        return f"Options of job {job.name}", job_flags(job), "this job takes no options of its own"


def _named_job(name: str):
    try:
        return _resolve(*job_and_file(name, None))
    except SpeedlayerError:
        return None
