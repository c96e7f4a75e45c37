"""A run's state directory before its queries start: what it pins, records and checks.

``prepare_state`` compares a resume's settings with the recorded ones, pins what must survive
restarts (a source's clock, the second streams', which may follow it), checks the sources, the checkpoints and the
sinks against them, and writes the manifest; ``pin_at_start`` lets a source choose its clock again
right before the first query starts.

>>> prepare_state(plan_run(RunSettings(job="fleet", state_dir="st")))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from speedlayer.core.uris import is_secret_option
from speedlayer.pipelines.base import Params
from speedlayer.runtime.checkpoints import check_intact, told_when_full
from speedlayer.runtime.manifest import (
    JOB_DEFINITION,
    check_resume,
    has_progress,
    option_text,
    read_manifest,
    resume_view,
    write_manifest,
)
from speedlayer.runtime.plan import RunPlan
from speedlayer.runtime.settings import LEGACY_INPUTS
from speedlayer.runtime.shared import check_shared_checkpoint


def _pin_inputs(plan: RunPlan, run_state: dict[str, Any]) -> None:
    """Pin each second stream's source in its own part of the run state.

    A source that follows a clock keeps the main source's, where it has one, so both streams' event
    times line up (the generator's default ``--rides`` does).
    """
    clock = plan.source.clock()
    for name, source in plan.inputs.items():
        if clock is not None and source.follow_clock(clock):
            plan.clock_followers.append(name)
        source.pin(run_state.setdefault("inputs", {}).setdefault(name, {}))


def pin_at_start(plan: RunPlan) -> None:
    """Right before the first query starts: a source may choose again what it pinned for a run with
    nothing recorded (the generator's clock, so its events are not seconds old when Spark starts
    reading them); the second streams that keep its clock follow, and the manifest is written again."""
    run_state = plan.manifest.get("run_state", {})
    if not plan.source.pin_at_start(run_state):
        return
    clock = plan.source.clock()
    for name in plan.clock_followers:
        if clock is not None and plan.inputs[name].follow_clock(clock):
            plan.inputs[name].pin(run_state.setdefault("inputs", {}).setdefault(name, {}))
    with told_when_full(plan.state_dir):
        write_manifest(plan.state_dir, plan.manifest)


def _job_options(params: Params) -> dict[str, Any]:
    """The job's options as validated (defaults included), secrets masked, as the manifest records them."""
    if params.options is None:
        return {}
    return {k: ("***" if is_secret_option(k) else option_text(v)) for k, v in params.options.model_dump().items()}


def _upgraded(recorded: dict[str, Any]) -> dict[str, Any]:
    """An earlier version's recorded settings: its ``rides`` is now an input."""
    upgraded = dict(recorded)
    for name in LEGACY_INPUTS:
        if upgraded.get(name):
            upgraded["inputs"] = {name: upgraded.pop(name), **(upgraded.get("inputs") or {})}
    return upgraded


def prepare_state(plan: RunPlan) -> None:
    """Create the state directory, pin what must survive restarts, check sinks against checkpoints.

    Runs once per plan: the CLI calls it before starting Spark, ``Run.start`` when nobody has.
    """
    if plan.prepared:
        return
    recorded = read_manifest(plan.state_dir, plan.job.name) or {}
    settings, job_options = plan.settings.masked(), _job_options(plan.params)
    if plan.job.definition is not None:  # a job file: what it computes is compared like a setting
        settings[JOB_DEFINITION] = plan.job.definition
    if recorded and has_progress(plan.state_dir):
        before = resume_view(_upgraded(recorded.get("settings", {})), recorded.get("job_options"))
        note = check_resume(before, resume_view(settings, job_options), plan.state_dir,
                            plan.settings.allow_changed_settings)
        if note:
            plan.notes.append(note)
    run_state = recorded.get("run_state", {})
    plan.source.check()
    plan.source.pin(run_state)
    for source in plan.inputs.values():
        source.check()
    _pin_inputs(plan, run_state)
    check_shared_checkpoint(plan.queries, plan.state_dir)
    for query in plan.queries:
        check_intact(query.checkpoint, query.output.name)
        query.sink.check(query.output.name, query.fresh)
    with told_when_full(plan.state_dir):
        plan.state_dir.mkdir(parents=True, exist_ok=True)
        plan.manifest = {"job": plan.job.name, "settings": settings, "job_options": job_options, "run_state": run_state}
        write_manifest(plan.state_dir, plan.manifest)
    plan.prepared = True
