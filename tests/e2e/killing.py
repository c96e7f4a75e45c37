"""Crash a CLI run for real: SIGKILL its whole process group (Python, the JVM) and Spark's Python workers.

A run is started in a new session, so its process group holds the ``speedlayer`` process and the
JVM; PySpark's worker daemons make groups of their own below it, and are killed with it. Kills are
placed by watching Spark's checkpoint logs: a batch whose ``offsets/N`` file exists but whose
``commits/N`` does not is in flight (planned, maybe partly written, not committed), which is the
moment a crash must not lose or repeat anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from speedlayer.testing.cluster import descendants, processes
from tests import servers

#: how often the checkpoint is looked at while waiting for a moment to kill
POLL_S = 0.05


def batch_ids(log: Path) -> set[int]:
    """The batch ids written to a checkpoint log directory (``offsets`` or ``commits``); temp and .crc files skipped."""
    if not log.is_dir():
        return set()
    return {int(p.name) for p in log.iterdir() if p.name.isdigit()}


@dataclass(frozen=True)
class QueryState:
    """Where one query's checkpoint stands: the last batch committed and the batch in flight (if any)."""

    committed: int  # -1: nothing committed yet
    planned: int  # last batch id in the offset log, -1: none

    @property
    def in_flight(self) -> int | None:
        return self.planned if self.planned > self.committed else None


def query_state(checkpoint: Path) -> QueryState:
    return QueryState(max(batch_ids(checkpoint / "commits"), default=-1),
                      max(batch_ids(checkpoint / "offsets"), default=-1))


def states(checkpoints: Path) -> dict[str, QueryState]:
    """Every query's state under ``<state-dir>/checkpoints``."""
    if not checkpoints.is_dir():
        return {}
    return {d.name: query_state(d) for d in sorted(checkpoints.iterdir()) if d.is_dir()}


class CliProcess:
    """``python -m speedlayer ARGS`` in its own session, output to a log file; killed as a whole."""

    def __init__(self, args: list[str], cwd: Path, log: Path):
        self.args, self.log = args, log
        env = {**os.environ, "COLUMNS": "200"}
        self._out = open(log, "w")  # noqa: SIM115 — closed in wait/kill
        self.proc = subprocess.Popen([sys.executable, "-m", "speedlayer", *args], cwd=cwd, env=env,
                                     stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        self.pgid = self.proc.pid  # start_new_session: the child leads its own process group

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(errors="replace")

    def tail(self, chars: int = 3000) -> str:
        return self.output()[-chars:]

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"speedlayer {' '.join(self.args[:2])} did not end in {timeout:.0f}s; "
                                 f"output:\n{self.tail()}") from None
        finally:
            self._out.close()

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the run's process group and every process group below it, then wait until none is left.

        PySpark's worker daemons move into process groups of their own (``os.setpgid(0, 0)``), so
        killing our group alone would leave Spark's Python workers to notice the JVM's end by
        themselves, possibly still writing to a sink. A crash of the whole job kills them too.
        """
        _killpg(self.pgid, signal.SIGSTOP)  # frozen first: nothing of ours can start or move a process now
        groups = {self.pgid} | {pgid for _, pgid in descendants(self.proc.pid)}
        for group in groups:
            _killpg(group)
        self.proc.wait(timeout)
        if not self._out.closed:
            self._out.close()
        deadline = time.monotonic() + timeout
        while living_in(groups):
            if time.monotonic() > deadline:
                raise AssertionError(f"processes of groups {sorted(groups)} survived SIGKILL for {timeout:.0f}s")
            for group in groups:  # a worker forked while we were killing
                _killpg(group)
            time.sleep(POLL_S)


def _killpg(group: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def living_in(groups: set[int]) -> list[int]:
    """Processes of these groups that are still alive (zombies waiting for their reaper count as dead)."""
    return [pid for pid, _, pgid, state in processes() if pgid in groups and state != "Z"]


def wait_for(condition: Callable[[], object], process: CliProcess, timeout: float, what: str):
    """Poll ``condition`` until it is truthy; fail if the process ends first or the time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if process.proc.poll() is not None:
            raise AssertionError(f"speedlayer exited with {process.proc.returncode} while waiting for {what}; "
                                 f"output:\n{process.tail()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"no {what} within {timeout:.0f}s; output:\n{process.tail()}")
        time.sleep(POLL_S)


@dataclass(frozen=True)
class Kill:
    """What a kill hit: the watched output's batch in flight and every query's state after the crash."""

    output: str
    batch: int
    after: dict[str, QueryState]

    def describe(self) -> str:
        shown = ", ".join(f"{name}: committed {s.committed}, in flight {s.in_flight}" for name, s in self.after.items())
        return f"killed in batch {self.batch} of {self.output} ({shown})"


def kill_mid_batch(process: CliProcess, state_dir: Path, output: str, after_commit: int, timeout: float) -> Kill | None:
    """SIGKILL the run once ``output`` has committed batch ``after_commit`` (or later) and runs the next one.

    Returns what the crash left in the checkpoint, or None when the batch committed in the few
    milliseconds between looking and killing (nothing was in flight: the caller tries again).
    """
    checkpoint = state_dir / "checkpoints" / output

    def moment() -> QueryState | None:
        s = query_state(checkpoint)
        return s if s.committed >= after_commit and s.in_flight is not None else None

    wait_for(moment, process, timeout, f"batch in flight after commit {after_commit} of {output}")
    process.kill()
    after = states(state_dir / "checkpoints")
    hit = after[output].in_flight
    return Kill(output, hit, after) if hit is not None else None


# --- reading what the crashed runs wrote ----------------------------------------------------------

def postgres_rows(url: str, table: str, columns: list[str]) -> list[tuple]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        return conn.execute(sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table))).fetchall()


def mysql_rows(url: str, table: str, columns: list[str]) -> list[tuple]:
    from contextlib import closing

    import pymysql

    database = url.rsplit("/", 1)[1]
    with closing(pymysql.connect(host=servers.MARIADB.host, port=servers.MARIADB.port, user="root", password="",
                                 database=database)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM `{table}`")
        return list(cur.fetchall())


#: frames of PySpark's own Python code: a traceback made only of these and the standard library's is
#: PySpark's, e.g. its streaming source runner finding its socket closed while the run stops
_PYSPARK = ("/pyspark.zip/pyspark/", "/site-packages/pyspark/")


def _pysparks_or_stdlib(frame: str) -> bool:
    return any(part in frame for part in _PYSPARK) or ("/lib/python3." in frame and "-packages/" not in frame)


def our_tracebacks(output: str) -> list[str]:
    """The Python tracebacks in ``output`` with a frame outside PySpark's own code and the standard library.

    PySpark's Python workers print to the run's stderr; at a stop, its streaming source runner can
    print an ``EOFError`` traceback of its own (a shutdown race inside PySpark). A traceback through
    speedlayer's or a user's code is never excused.

    >>> our_tracebacks('Traceback (most recent call last):\\n  File "/x/pyspark.zip/pyspark/serializers.py", line 5\\nEOFError')
    []
    """
    blocks, current = [], None
    for line in output.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            current = [line]
            blocks.append(current)
        elif current is not None and line.startswith(" "):
            current.append(line)
        else:
            current = None
    frames = [[f for f in b if f.strip().startswith("File ")] for b in blocks]
    return ["\n".join(b) for b, fs in zip(blocks, frames)
            if not fs or not all(_pysparks_or_stdlib(f) for f in fs)]
