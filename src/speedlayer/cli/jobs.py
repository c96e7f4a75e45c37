"""``speedlayer jobs``: the jobs there are, one line each."""

from __future__ import annotations

from speedlayer.cli.console import out


def jobs_command() -> None:
    """List the jobs, one line each, with their outputs."""
    from speedlayer.pipelines import JOBS

    for job in JOBS.values():
        out.print(f"{job.name:<12} {job.summary} (outputs: {', '.join(job.outputs)}; default source: {job.default_source})",
                  soft_wrap=True, markup=False)
