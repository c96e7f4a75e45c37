"""``speedlayer train JOB``: fit the model a job declares (``Job.trainer``) in batch, and save it.

The trainer's settings are flags of their own, as a job's options are flags of ``speedlayer run``
(``speedlayer train fraud --model models/fraud --events 50000``); ``--option KEY=VALUE`` says the same.
"""

from __future__ import annotations

import typer

from speedlayer.cli.console import err, out
from speedlayer.cli.job_help import JobHelpCommand
from speedlayer.core.errors import ConfigError, SpeedlayerError
from speedlayer.runtime.settings import pairs


def train_command(
    ctx: typer.Context,
    job: str = typer.Argument(..., help="the job whose model to fit: a name (fraud) or MODULE:ATTRIBUTE"),
    option: list[str] | None = typer.Option(None, "--option", help="KEY=VALUE training setting (repeatable)"),
    master: str = typer.Option("local[*]", "--master", help="Spark master that trains"),
) -> None:
    """Fit a job's model in batch and save it (fraud: a Spark ML pipeline and card profiles, on generated history)."""
    from speedlayer.cli.job_flags import option_flags, parse_flags
    from speedlayer.core.uris import parse_options

    trainer = _trainer(job)
    given = parse_flags(ctx.args, option_flags(trainer.options), f"the training of job {job!r}", f"speedlayer train {job}",
                        [o for p in ctx.command.params for o in p.opts])["option"]
    options = parse_options(trainer.options, {**given, **pairs(option, "--option", "KEY=VALUE")}, f"speedlayer train {job}")

    import tempfile
    from pathlib import Path

    from speedlayer.runtime.session import build_session, check_java

    check_java()
    log_file = Path(tempfile.gettempdir()) / "speedlayer-train-spark.log"
    err.print(f"starting Spark ({master}); Spark's log: {log_file}", soft_wrap=True, markup=False)
    spark = build_session(master, {"spark.ui.enabled": "false"}, app_name="speedlayer-train", log_file=log_file)
    try:
        lines = trainer.fit(spark, options)
    finally:
        spark.stop()
    for line in lines:
        out.print(line, soft_wrap=True, markup=False)


def _trainer(name: str):
    """The trainer job ``name`` declares; a job without one is refused, naming the jobs that have one."""
    from speedlayer.pipelines import get_job, jobs

    trainer = get_job(name).trainer
    if trainer is None:
        having = [n for n, j in jobs().items() if j.trainer is not None]
        raise ConfigError(f"job {name!r} has no model to train: train one of {', '.join(having) or 'none'} "
                          "(a job declares its model with Job(trainer=Trainer(...)))")
    return trainer


class TrainCommand(JobHelpCommand):
    """``speedlayer train``, whose ``--help`` also lists the named job's training settings (``train fraud --help``)."""

    unnamed = "each job's training settings are flags: 'speedlayer train JOB --help' lists them"

    def named_job(self, name: str):
        from speedlayer.pipelines import get_job

        try:
            return get_job(name)
        except SpeedlayerError:
            return None

    def job_flags(self, job) -> tuple[str, dict, str]:
        from speedlayer.cli.job_flags import option_flags

        if job.trainer is None:
            return f"Training of job {job.name}", {}, "this job has no model to train"
        return f"Training of job {job.name}", option_flags(job.trainer.options), "it takes no settings"
