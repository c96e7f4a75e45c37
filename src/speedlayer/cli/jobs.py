"""``speedlayer jobs [NAME | MODULE:ATTRIBUTE]``: every job and the package it comes from, or one job described."""

from __future__ import annotations

import importlib.metadata as metadata

import typer

from speedlayer.cli.console import out


def package_label(name: str) -> str:
    """A distribution's name and installed version ("speedlayer 0.9.0"), or the name alone."""
    try:
        return f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return name


def say(line: str) -> None:
    """One line on stdout, as is (no markup, no wrapping)."""
    out.print(line, soft_wrap=True, markup=False, highlight=False)


def say_problems(problems: list) -> None:
    """The plug-ins that are not used, one line each, under a heading; nothing when there are none."""
    if problems:
        say(f"plug-ins not used ({len(problems)}):")
        for problem in problems:
            say(f"  {problem}")


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
        origin = f"package {package_label(entry.package)} ({entry.target})" if entry else f"reference {job}"
        for line in describe(found, origin):
            say(line)
        return
    for name, entry in registry.entries.items():
        spec = entry.value
        source = spec.default_source or "none, give --source"
        say(f"{name:<12} {spec.summary} (outputs: {', '.join(spec.outputs)}; default source: {source}; "
            f"from {package_label(entry.package)})")
    say_problems(_problems(registry))
    say("describe one with 'speedlayer jobs NAME'; run your own with 'speedlayer run MODULE:ATTRIBUTE'")


def _problems(registry) -> list:
    """The plug-in problems of every registry (jobs, sources, sinks)."""
    from speedlayer.sinks import sink_registry
    from speedlayer.sources import source_registry

    return [*registry.problems, *source_registry().problems, *sink_registry().problems]
