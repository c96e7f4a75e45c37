"""Fault injection: hold a run at a named phase of a micro-batch, so that a crash test can kill it there.

Crash tests (and anyone checking a deployment's recovery) need to kill a run at a precise moment
of a micro-batch, and to show that the moment was reached. With ``SPEEDLAYER_FAULT=PHASE:BATCH``
and ``SPEEDLAYER_FAULT_DIR=DIR`` in the environment of ``speedlayer run``, every sink that writes
through ``foreachBatch`` (PostgreSQL, MySQL, Redis) stops when it reaches PHASE of its batch BATCH:
it writes a marker file into DIR, then waits until it is killed (``PHASE:BATCH:once``: only the
first to arrive, e.g. one executor of a cluster), for at most ``SPEEDLAYER_FAULT_HOLD`` seconds
(default 600): then the batch fails with one line naming the variable, so a forgotten setting
cannot hang a run for good. A run started with it set says so before it starts. The phases, in order:

- ``planned``: the batch is in the offset log and the sink's function starts; nothing written yet;
- ``mid-write``: an executor has written the first record batch of its partition;
- ``partition-written``: an executor has written all of its partition; for a stateful query the
  partition's state store version is committed (the state store commits once its rows are read);
- ``written``: every row of the batch is written; the commit log does not hold the batch yet.

Unset (the normal case), each hook costs one environment lookup per batch and partition.

>>> reached("planned", 3, "PostgreSQL")  # SPEEDLAYER_FAULT unset: returns at once
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from speedlayer.core.errors import SpeedlayerError


class FaultHeld(SpeedlayerError):
    """A requested fault held a batch for its whole time and nobody killed the run."""

PHASES = ("planned", "mid-write", "partition-written", "written")
ENV, DIR_ENV, HOLD_ENV = "SPEEDLAYER_FAULT", "SPEEDLAYER_FAULT_DIR", "SPEEDLAYER_FAULT_HOLD"
#: longest a hook holds a batch, in seconds, unless SPEEDLAYER_FAULT_HOLD says otherwise
HOLD_S = 600.0


def note() -> str | None:
    """The line a run prints before it starts when a fault is requested, else None.

    >>> note() if ENV not in os.environ else None
    """
    spec = os.environ.get(ENV)
    return (f"{ENV}={spec} is set: sinks hold at that phase of that batch (fault injection for crash tests); "
            f"unset it to run normally") if spec else None


def executor_env() -> dict[str, str]:
    """Spark settings that hand this run's fault request to a cluster's executors (local ones inherit it).

    >>> executor_env() if ENV not in os.environ else {}
    {}
    """
    return {f"spark.executorEnv.{name}": os.environ[name] for name in (ENV, DIR_ENV, HOLD_ENV) if os.environ.get(name)}


def wanted(phase: str, batch_id: int, spec: str | None) -> bool:
    """Whether ``spec`` (``PHASE:BATCH`` or ``PHASE:BATCH:once``) asks to stop at ``phase`` of batch ``batch_id``.

    >>> wanted("mid-write", 4, "mid-write:4"), wanted("mid-write", 5, "mid-write:4"), wanted("written", 4, None)
    (True, False, False)
    """
    if not spec:
        return False
    name, batch, *_ = (spec.split(":") + [""])[:3]
    return name == phase and batch.strip() == str(batch_id)


def _first_to_arrive(folder: Path, phase: str, batch_id: int) -> bool:
    try:
        os.close(os.open(folder / f"{phase}-{batch_id}.claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def reached(phase: str, batch_id: int, where: str) -> None:
    """Mark and hold here if the environment asks for a fault at ``phase`` of batch ``batch_id``.

    The marker is ``DIR/PHASE-BATCH-WHERE-PID`` (``where`` names the sink, e.g. its server). With
    ``:once`` only the first process to arrive holds (the one a test kills); the rest, and a retry of
    the killed task, go on.
    """
    spec = os.environ.get(ENV)
    if not wanted(phase, batch_id, spec):
        return
    folder = Path(os.environ.get(DIR_ENV) or ".")
    folder.mkdir(parents=True, exist_ok=True)
    if spec.endswith(":once") and not _first_to_arrive(folder, phase, batch_id):
        return
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", where)[:80]
    (folder / f"{phase}-{batch_id}-{slug}-{os.getpid()}").write_text(f"{time.time():.3f}\n")
    hold_s = float(os.environ.get(HOLD_ENV) or HOLD_S)
    time.sleep(hold_s)  # held until the test kills the run
    raise FaultHeld(f"held at {phase} of batch {batch_id} for {hold_s:g}s by {ENV}={spec}: unset {ENV} to run normally")
