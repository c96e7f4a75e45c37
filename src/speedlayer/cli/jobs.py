"""``speedlayer jobs [NAME | MODULE:ATTRIBUTE]``: every job and the package it comes from, or one job described."""

from __future__ import annotations

import importlib.metadata as metadata

import typer

from speedlayer.cli.console import out


def _package(name: str) -> str:
    try:
        return f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return name


def _say(line: str) -> None:
    out.print(line, soft_wrap=True, markup=False, highlight=False)


def jobs_command(
    job: str | None = typer.Argument(None, help="describe this job: a name, or MODULE:ATTRIBUTE"),
) -> None:
    """List the jobs (built-in and plug-in) with their package, or describe one: outputs, events, options."""
    from speedlayer.cli.describe import describe
    from speedlayer.pipelines import get_job, job_registry

    registry = job_registry()
    if job is not None:
        found = get_job(job)
        entry = registry.entries.get(job)
        origin = f"package {_package(entry.package)} ({entry.target})" if entry else f"reference {job}"
        for line in describe(found, origin):
            _say(line)
        return
    for name, entry in registry.entries.items():
        spec = entry.value
        source = spec.default_source or "none, give --source"
        _say(f"{name:<12} {spec.summary} (outputs: {', '.join(spec.outputs)}; default source: {source}; "
             f"from {_package(entry.package)})")
    problems = _problems(registry)
    if problems:
        _say(f"plug-ins not used ({len(problems)}):")
        for problem in problems:
            _say(f"  {problem}")
    _say("describe one with 'speedlayer jobs NAME'; run your own with 'speedlayer run MODULE:ATTRIBUTE'")


def _problems(registry) -> list:
    """The plug-in problems of every registry (jobs, sources, sinks)."""
    from speedlayer.sinks import sink_registry
    from speedlayer.sources import source_registry

    return [*registry.problems, *source_registry().problems, *sink_registry().problems]
