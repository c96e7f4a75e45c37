"""The job registry: every job an installed package declares (entry-point group ``speedlayer.jobs``).

speedlayer's own jobs are declared in its pyproject.toml exactly like a plug-in's; ``get_job`` also
takes a ``module:attribute`` reference to a Job that no package declares.

>>> get_job("fleet").name  # doctest: +SKIP
'fleet'
"""

from __future__ import annotations

from typing import Any

from speedlayer.core import plugins
from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.base import Job
from speedlayer.pipelines.reference import is_reference, load_job

#: speedlayer's own jobs, as its pyproject.toml declares them (used when its metadata is missing)
BUILTIN_JOBS = {
    "fleet": "speedlayer.pipelines.fleet:FLEET",
    "wordcount": "speedlayer.pipelines.wordcount:WORDCOUNT",
    "app-actions": "speedlayer.pipelines.app_actions:APP_ACTIONS_JOB",
    "fraud": "speedlayer.pipelines.fraud:FRAUD",
}


def _check_job(name: str, value: Any) -> str | None:
    if not isinstance(value, Job):
        return f"is {plugins.kind_of(value)}, not a speedlayer Job"
    if value.name != name:
        return f"is the Job named {value.name!r}, not {name!r}: a job's entry-point name must be its name"
    return None


def job_registry() -> plugins.Registry:
    """Every registered job (built-in and plug-in) with its package, and the plug-ins that could not be used."""
    return plugins.registry("job", BUILTIN_JOBS, _check_job)


def jobs() -> dict[str, Job]:
    """Name -> Job of every registered job.

    >>> list(jobs())[:2]  # doctest: +SKIP
    ['fleet', 'wordcount']
    """
    return job_registry().values()


def get_job(name: str) -> Job:
    """The job called ``name``, or the one a ``module:attribute`` reference names; an unknown name lists the ones there are.

    >>> get_job("my_package.jobs:ORDERS").name  # doctest: +SKIP
    'orders'
    """
    if is_reference(name):
        return load_job(name)
    found = job_registry()
    plugins.report(found)
    if name in found.entries:
        return found.entries[name].value
    raise ConfigError(f"unknown job {name!r}: choose one of {', '.join(found.entries) or 'none'} (see 'speedlayer jobs'), "
                      "or name your own as MODULE:ATTRIBUTE (e.g. my_package.jobs:ORDERS)")
