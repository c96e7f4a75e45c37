"""Planning a helper's run the way ``speedlayer run`` plans one, with a ``CollectSink`` per output.

>>> resolve_job("wordcount").name
'wordcount'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines import get_job
from speedlayer.pipelines.base import Job
from speedlayer.runtime.plan import RunPlan, plan_run
from speedlayer.runtime.settings import build_settings
from speedlayer.testing.collect import CollectSink

#: settings a helper sets itself: the events' landing directory, the trigger, the collecting sinks
OWN_SETTINGS = ("job", "source", "sinks", "trigger", "state_dir", "output_mode", "max_events", "duration")


def resolve_job(job: Job | str) -> Job:
    """A Job object as it is, or the registered job of that name."""
    if isinstance(job, Job):
        return job
    if isinstance(job, str):
        return get_job(job)
    raise ConfigError(f"job must be a Job or the name of a registered job, not {type(job).__name__}")


def check_outputs(job: Job, outputs: Iterable[str], batches: int) -> list[str]:
    """The outputs a helper can feed from one landing directory, or a ConfigError that says why not."""
    chosen = list(outputs)
    for name in chosen:
        if name not in job.outputs:
            raise ConfigError(f"job {job.name!r} has no output {name!r}: its outputs are {', '.join(job.outputs)}")
        spec = job.outputs[name]
        if spec.inputs or spec.dead_letters_of:
            raise ConfigError(f"output {name!r} reads a second stream ({', '.join(spec.inputs or [spec.dead_letters_of])}), "
                              "and the testing helpers feed one: select the job's other outputs")
        if spec.per_batch is not None and batches > 1:
            raise ConfigError(f"output {name!r} is computed per micro-batch, so {batches} batches differ from one batch "
                              "run by design: give its events as one batch (a flat list)")
    if not chosen:
        raise ConfigError(f"no output selected: name some of {', '.join(job.outputs)}")
    return chosen


def default_outputs(job: Job) -> list[str]:
    """The outputs a run writes when it names none, less those the helpers cannot feed."""
    names = job.default_outputs or tuple(job.outputs)
    return [n for n in names if not (job.outputs[n].inputs or job.outputs[n].dead_letters_of or job.outputs[n].per_batch)]


def plan_collected(job: Job, source: str, outputs: list[str], state_dir: Path, trigger: str,
                   modes: Mapping[str, str] | None, settings: Mapping[str, Any]) -> tuple[RunPlan, dict[str, CollectSink]]:
    """A run of ``outputs`` from ``source``, planned by ``plan_run``, each output into its own ``CollectSink``."""
    taken = sorted(set(settings) & set(OWN_SETTINGS))
    if taken:
        raise ConfigError(f"the testing helpers set {', '.join(taken)} themselves: drop {taken[0]}= "
                          "(output modes: modes={...} of assert_stream_equals_batch, mode= of ScriptedStream)")
    values = {**settings, "job": job.name, "source": source, "trigger": trigger, "state_dir": str(state_dir),
              "output_mode": dict(modes or {})}
    sinks = {name: CollectSink() for name in outputs}
    return plan_run(build_settings({}, values), job=job, sinks=sinks), sinks
