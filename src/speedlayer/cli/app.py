"""The ``speedlayer`` command: run a job, produce events, measure (bench, advise), list jobs, sources and sinks.

Each command lives in its own module beside this one; heavy imports (Spark, the monitor) happen
inside the commands, so ``speedlayer --help`` stays fast.

    speedlayer run fleet --source 'generator://?rate=20000&seed=7' --sink windows=parquet:out/windows
    speedlayer --debug run my_package.jobs:ORDERS --source files:///landing
    speedlayer jobs
"""

from __future__ import annotations

import sys

import typer

from speedlayer import __version__
from speedlayer.cli import debug
from speedlayer.cli.bench import advise_command, bench_command
from speedlayer.cli.connectors import sinks_command, sources_command
from speedlayer.cli.console import err, out
from speedlayer.cli.jobs import jobs_command
from speedlayer.cli.produce import produce_command
from speedlayer.cli.run import RunCommand, run_command
from speedlayer.cli.sql import sql_command
from speedlayer.cli.status import status_command
from speedlayer.cli.train import TrainCommand, train_command
from speedlayer.cli.warm_up import warm_up_command
from speedlayer.core.errors import SpeedlayerError

#: click's UsageError as the click inside Typer raises it: Typer exports BadParameter, a subclass, not the class
USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")

app = typer.Typer(
    name="speedlayer",
    help="Real-time stream processing on Spark Structured Streaming.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command("jobs")(jobs_command)
# a job's options and a trainer's settings are flags the command does not declare (speedlayer.cli.job_flags)
JOB_FLAGS = {"allow_extra_args": True, "ignore_unknown_options": True}
app.command("run", cls=RunCommand, context_settings=JOB_FLAGS)(run_command)
app.command("train", cls=TrainCommand, context_settings=JOB_FLAGS)(train_command)
for name, command in (("sources", sources_command), ("sinks", sinks_command), ("produce", produce_command),
                      ("bench", bench_command), ("advise", advise_command),
                      ("status", status_command), ("sql", sql_command), ("warm-up", warm_up_command)):
    app.command(name)(command)


@app.callback()
def global_options(
    debug_on: bool = typer.Option(False, "--debug", envvar=debug.ENV,
                                  help="on an error, also print the traceback and Spark's full error text"),
) -> None:
    """Real-time stream processing on Spark Structured Streaming."""
    debug.enable(debug_on)


@app.command("version")
def version_command() -> None:
    """Print speedlayer's version."""
    out.print(f"speedlayer {__version__}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes exit 2 with one line, no traceback (``--debug`` adds it)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=args or ["--help"], standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("stopped")
        sys.exit(130)
    except USAGE_ERROR as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        err.print(f"error: {exc.format_message()}{hint}", soft_wrap=True)
        sys.exit(2)
    except SpeedlayerError as exc:
        err.print(f"error: {exc}", soft_wrap=True, markup=False)
        if debug.enabled():
            err.print(debug.details(exc), soft_wrap=True, markup=False, highlight=False)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
