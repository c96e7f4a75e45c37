"""The run manifest, the state directory's lock, and the rule for resuming from a state directory.

The manifest (``speedlayer-run.json``) records the job, its settings (secrets masked) and what
must survive restarts (e.g. the generator's start). A resume whose settings would change the
results is refused unless the user says it is intended; a second run on a state directory in use
is refused at once.

>>> lock = lock_state_dir(Path("state/fleet"))  # doctest: +SKIP
>>> check_resume(recorded, current, Path("state/fleet"), allow=False)  # doctest: +SKIP
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError

MANIFEST = "speedlayer-run.json"
#: the recorded setting that holds a job file's digest (``Job.definition``): what the job computes
JOB_DEFINITION = "job_definition"
LOCK_FILE = "run.lock"
ALLOW_FLAG = "--allow-changed-settings"
#: settings that do not change what a query computes: a resume may change them freely.
#: Every other setting (window, watermark, zones, source and its seed, job options, output modes,
#: ...) changes results, including settings added later, unless listed here.
NEUTRAL_SETTINGS = frozenset({
    "duration", "max_events",          # when the run stops
    "trigger",                         # how often batches run
    "master", "conf", "spark_ui", "ship",  # where and how Spark runs
    "sinks",                           # adding an output starts its own checkpoint; URIs are the user's choice
    "state_dir", "allow_changed_settings",
    "job_file",                        # where the job file lies; what it defines is compared as job_definition
    "incident_initial_state",          # read only when the incidents query first starts
    "one_query",                       # how outputs are grouped in queries: the checkpoints check it
    "max_state_memory", "retain_batches", "max_checkpoint_size",  # what a run keeps, not what it computes
})


def read_manifest(state_dir: Path, job: str) -> dict[str, Any] | None:
    """The manifest of an earlier run in ``state_dir`` (None if there is none); another job's is refused."""
    manifest = state_dir / MANIFEST
    if not manifest.is_file():
        return None
    try:
        recorded = json.loads(manifest.read_text())
    except ValueError:
        raise ConfigError(f"{manifest} is damaged: remove the state directory to start over") from None
    if recorded.get("job") != job:
        raise ConfigError(f"state directory {state_dir} belongs to job {recorded.get('job')!r}, "
                          f"not {job!r}: give this job its own --state-dir")
    return recorded


def write_manifest(state_dir: Path, manifest: Mapping[str, Any]) -> None:
    """Replace the manifest atomically: a crash leaves the old one or the new one, never half of one.

    >>> write_manifest(Path("state/fleet"), {"job": "fleet", "settings": {}, "run_state": {}})  # doctest: +SKIP
    """
    target = state_dir / MANIFEST
    temp = state_dir / f".{MANIFEST}.{os.getpid()}.tmp"
    try:
        with open(temp, "w") as file:
            file.write(json.dumps(manifest, indent=2, default=str))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def has_progress(state_dir: Path) -> bool:
    """Whether any query of an earlier run in ``state_dir`` has planned a batch (so this run resumes)."""
    return any(p.is_dir() and any(p.iterdir()) for p in (state_dir / "checkpoints").glob("*/offsets"))


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={v}" for k, v in sorted(value.items())) + "}" if value else "{}"
    return "default" if value is None else str(value)


def option_text(value: Any) -> str | None:
    """A job option's value as a manifest records it: text, booleans as ``true``/``false``.

    >>> option_text(True), option_text(20), option_text(None)
    ('true', '20', None)
    """
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def resume_view(settings: Mapping[str, Any], job_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Settings as a resume compares them: the job's validated options (defaults included) each by its
    own name in place of the options given; a manifest of an earlier version, which has no
    ``job_options``, gives them from its top-level keys (the fleet's ``trip_gap`` was one) or its options.

    >>> resume_view({"window": "10s", "options": {}, "trip_gap": "5min"}, None)
    {'window': '10s', 'trip_gap': '5min'}
    """
    view = {k: v for k, v in settings.items() if k != "options"}
    if job_options is None:  # earlier versions kept numbers and booleans of job settings as such
        view.update({k: option_text(v) for k, v in view.items() if isinstance(v, (bool, int, float))})
        view.update({k: option_text(v) for k, v in (settings.get("options") or {}).items()})
        return view
    view.update({k: option_text(v) for k, v in job_options.items()})
    return view


def changed_settings(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The result-changing settings that differ, as ``name old → new``.

    >>> changed_settings({"window": "10s", "duration": 5}, {"window": "20s", "duration": 9})
    ['window 10s → 20s']
    """
    return [f"{name} {_shown(recorded[name])} → {_shown(value)}" for name, value in current.items()
            if name not in NEUTRAL_SETTINGS and name in recorded and recorded[name] != value]


def check_resume(recorded: Mapping[str, Any], current: Mapping[str, Any], state_dir: Path, allow: bool) -> str | None:
    """Refuse a resume whose settings change the results; with ``allow``, the note to print instead.

    >>> check_resume({"window": "10s"}, {"window": "10s"}, Path("st"), allow=False) is None
    True
    """
    changes = changed_settings(recorded, current)
    if not changes:
        return None
    what = ", ".join(changes)
    if not allow:
        raise ConfigError(f"state directory {state_dir} holds a run with other settings ({what}): its results would mix "
                          f"both; start over with a new --state-dir, or pass {ALLOW_FLAG} to resume on purpose")
    return f"resuming {state_dir} with changed settings ({what}), as {ALLOW_FLAG} asks"


class StateLock:
    """An exclusive ``flock`` on ``<state dir>/run.lock``, held until ``release`` or the process ends."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / LOCK_FILE
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip()
            self.release()
            by = f" (pid {holder})" if holder.isdigit() else ""
            raise ConfigError(f"state directory {state_dir} is in use by another run{by}: wait for it to stop, "
                              "or give this run its own --state-dir") from None
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # e.g. a full disk: the lock must not outlive the failure in this process
            self.release()
            raise

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def lock_state_dir(state_dir: Path) -> StateLock:
    """Take the state directory's lock; ConfigError naming it when another run holds it.

    >>> lock = lock_state_dir(Path("state/fleet")); lock.release()  # doctest: +SKIP
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    return StateLock(state_dir)
