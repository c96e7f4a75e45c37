"""What a run holds of its state directory while it runs: the lock, the manifest, what it pinned.

``prepare_state`` compares a resume's settings with the recorded ones, pins what must survive
restarts (a source's clock, the second streams', which may follow it), checks the sources, the
checkpoints and the sinks against them, writes the manifest and returns the ``RunState``;
``RunState.pin_at_start`` lets a source choose its clock again right before the first query starts.
The runner (``speedlayer.runtime.run.Run``) takes the lock, prepares, and releases and cleans up.

>>> state = prepare_state(plan_run(RunSettings(job="fleet", state_dir="st")))  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any

from speedlayer.core.uris import is_secret_option
from speedlayer.pipelines.base import Params
from speedlayer.runtime.checkpoints import check_intact, told_when_full
from speedlayer.runtime.manifest import (
    JOB_DEFINITION,
    StateLock,
    check_resume,
    has_progress,
    lock_state_dir,
    option_text,
    read_manifest,
    resume_view,
    write_manifest,
)
from speedlayer.runtime.plan import RunPlan
from speedlayer.runtime.settings import LEGACY_INPUTS
from speedlayer.runtime.shared import check_shared_checkpoint


@dataclass
class RunState:
    """A prepared run's hold on its state directory."""

    plan: RunPlan
    #: what the state directory's manifest holds (``pin_at_start`` writes it again)
    manifest: dict[str, Any]
    #: second streams that keep the main source's clock (``Source.follow_clock``)
    clock_followers: list[str] = field(default_factory=list)
    #: notes of the preparation (a resume with changed settings that are allowed)
    notes: list[str] = field(default_factory=list)
    #: the state directory's lock, held from before the manifest is written until ``release``
    lock: StateLock | None = None

    def pin_at_start(self) -> None:
        """Right before the first query starts: a source may choose again what it pinned for a run with
        nothing recorded (the generator's clock, so its events are not seconds old when Spark starts
        reading them); the second streams that keep its clock follow, and the manifest is written again."""
        plan, run_state = self.plan, self.manifest.get("run_state", {})
        if not plan.source.pin_at_start(run_state):
            return
        clock = plan.source.clock()
        for name in self.clock_followers:
            if clock is not None and plan.inputs[name].follow_clock(clock):
                plan.inputs[name].pin(run_state.setdefault("inputs", {}).setdefault(name, {}))
        with told_when_full(plan.state_dir):
            write_manifest(plan.state_dir, self.manifest)

    def release(self) -> None:
        """Free the state directory for the next run (idempotent)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def lock_and_prepare(plan: RunPlan) -> RunState:
    """Take the state directory's lock (another run holding it is a ConfigError), then ``prepare_state``;
    on any refusal the lock is released, and a state directory this run created (or a temporary one) removed."""
    created = not plan.state_dir.exists()
    with told_when_full(plan.state_dir):
        lock = lock_state_dir(plan.state_dir)
    try:
        state = prepare_state(plan)
    except BaseException:
        lock.release()
        if created:  # a refused first run leaves nothing behind (the lock's file made the directory)
            shutil.rmtree(plan.state_dir, ignore_errors=True)
        remove_temporary_state(plan)
        raise
    state.lock = lock
    return state


def remove_temporary_state(plan: RunPlan) -> None:
    """Remove the state directory of a run given none (``--state-dir`` unset); a kept one stays."""
    if plan.temporary_state:
        shutil.rmtree(plan.state_dir, ignore_errors=True)


def _pin_inputs(plan: RunPlan, run_state: dict[str, Any]) -> list[str]:
    """Pin each second stream's source in its own part of the run state; the names of those that
    follow the main source's clock.

    A source that follows a clock keeps the main source's, where it has one, so both streams' event
    times line up (the generator's default ``--rides`` does).
    """
    clock, followers = plan.source.clock(), []
    for name, source in plan.inputs.items():
        if clock is not None and source.follow_clock(clock):
            followers.append(name)
        source.pin(run_state.setdefault("inputs", {}).setdefault(name, {}))
    return followers


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


def prepare_state(plan: RunPlan) -> RunState:
    """Create the state directory, pin what must survive restarts, check sinks against checkpoints,
    write the manifest: the run's state, without the lock (``lock_and_prepare`` takes it first)."""
    recorded = read_manifest(plan.state_dir, plan.job.name) or {}
    settings, job_options = plan.settings.masked(), _job_options(plan.params)
    if plan.job.definition is not None:  # a job file: what it computes is compared like a setting
        settings[JOB_DEFINITION] = plan.job.definition
    notes = []
    if recorded and has_progress(plan.state_dir):
        before = resume_view(_upgraded(recorded.get("settings", {})), recorded.get("job_options"))
        note = check_resume(before, resume_view(settings, job_options), plan.state_dir,
                            plan.settings.allow_changed_settings)
        notes.extend([note] if note else [])
    run_state = recorded.get("run_state", {})
    plan.source.check()
    plan.source.pin(run_state)
    for source in plan.inputs.values():
        source.check()
    followers = _pin_inputs(plan, run_state)
    check_shared_checkpoint(plan.queries, plan.state_dir)
    for query in plan.queries:
        check_intact(query.checkpoint, query.output.name)
        query.sink.check(query.output.name, query.fresh)
    with told_when_full(plan.state_dir):
        plan.state_dir.mkdir(parents=True, exist_ok=True)
        manifest = {"job": plan.job.name, "settings": settings, "job_options": job_options, "run_state": run_state,
                    "tables": {name: table.record() for name, table in plan.tables().items()}}
        write_manifest(plan.state_dir, manifest)
    return RunState(plan, manifest, followers, notes)
