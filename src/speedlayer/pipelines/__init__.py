"""The job registry: ``JOBS[name]`` is a Job (see ``speedlayer.pipelines.base``)."""

from __future__ import annotations

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.app_actions import APP_ACTIONS_JOB
from speedlayer.pipelines.base import Job
from speedlayer.pipelines.fleet import FLEET
from speedlayer.pipelines.fraud import FRAUD
from speedlayer.pipelines.wordcount import WORDCOUNT

JOBS: dict[str, Job] = {job.name: job for job in (FLEET, WORDCOUNT, APP_ACTIONS_JOB, FRAUD)}


def get_job(name: str) -> Job:
    """The job called ``name``; an unknown name lists the ones there are."""
    try:
        return JOBS[name]
    except KeyError:
        raise ConfigError(f"unknown job {name!r}: choose one of {', '.join(JOBS)} (see 'speedlayer jobs')") from None
