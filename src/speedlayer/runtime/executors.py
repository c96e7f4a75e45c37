"""The executors of a run: how many run tasks now, their cores, and which were lost while it ran.

*Executors* here are the JVMs that run the run's tasks. On a cluster (``--master spark://…``) that
excludes the driver; in local mode the driver runs every task, so there is exactly one, the driver
(``local: true``), with the cores of ``local[N]``.

The figures come from Spark's own status store (what its UI and REST API ``allexecutors`` serve),
read through the JVM, so they are there with ``--spark-ui off`` too: one Py4J call that hands back
the list as JSON (~2 ms). Should that private route fail, the scheduler's executor ids
(``SparkContext.getExecutorIds``) still give the count, without cores or reasons. Nothing here
can fail or slow a batch: ``ExecutorWatch.poll`` reads at most once a second, from whichever
thread asks (the listener after a batch, a scrape, the page, the terminal view), and swallows any
error (logged at debug).

An executor is *lost* when it was alive and is gone, or when Spark reports it removed after the
watch started; its time and reason are Spark's where Spark gives them.

>>> watch = ExecutorWatch.for_session(spark)  # doctest: +SKIP
>>> watch.poll().short()                      # doctest: +SKIP
'executors 2 (1 lost), 4 cores'
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speedlayer.core.times import iso

log = logging.getLogger("speedlayer.monitor")

#: Spark's id of the driver in its executor list
DRIVER = "driver"
#: the file in the state directory that ``speedlayer status`` reads
EXECUTORS_FILE = "executors.json"
#: lost executors whose details are kept (all are counted)
KEEP_LOST = 20

Reader = Callable[[], "list[ExecutorRecord]"]


@dataclass(frozen=True)
class ExecutorRecord:
    """One executor as Spark lists it (the driver has the id ``driver``)."""

    id: str
    host_port: str = ""
    active: bool = True
    cores: int | None = None
    removed_ms: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LostExecutor:
    """An executor gone while the run went on: when (epoch ms) and, where Spark says, why."""

    id: str
    host_port: str
    lost_ms: int
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lost_at": iso(self.lost_ms)}


@dataclass(frozen=True)
class ExecutorReport:
    """What the run's executors look like now; ``alive`` is None until Spark has been read once."""

    local: bool = False
    alive: int | None = None
    cores: int | None = None
    lost_count: int = 0
    #: the newest lost executors, oldest first (at most KEEP_LOST)
    lost: tuple[LostExecutor, ...] = ()
    #: when what this report says last changed (epoch ms)
    updated_ms: int | None = None

    def summary(self) -> str:
        """The dashboard's figure: ``2``, ``2 (1 lost)``, ``local``, or ``-`` when unknown.

        >>> ExecutorReport(alive=2, lost_count=1).summary(), ExecutorReport(local=True, alive=1).summary()
        ('2 (1 lost)', 'local')
        """
        if self.alive is None:
            return "-"
        if self.local:
            return "local"
        return f"{self.alive} ({self.lost_count} lost)" if self.lost_count else str(self.alive)

    def short(self) -> str:
        """One short field for the terminal view and ``speedlayer status``.

        >>> ExecutorReport(alive=2, cores=4, lost_count=1).short()
        'executors 2 (1 lost), 4 cores'
        >>> ExecutorReport(local=True, alive=1, cores=2).short()
        'executors: local (the driver), 2 cores'
        """
        if self.alive is None:
            return "executors unknown"
        cores = f", {self.cores} cores" if self.cores is not None else ""
        if self.local:
            return f"executors: local (the driver){cores}"
        return f"executors {self.summary()}{cores}"

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (the dashboard's ``executors`` field, the state directory's file)."""
        return {"local": self.local, "alive": self.alive, "cores": self.cores, "lost_count": self.lost_count,
                "lost": [x.as_dict() for x in self.lost], "updated_ms": self.updated_ms, "summary": self.summary()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutorReport:
        lost = tuple(LostExecutor(str(x.get("id")), str(x.get("host_port") or ""), int(x.get("lost_ms") or 0),
                                  x.get("reason")) for x in data.get("lost") or [])
        return cls(bool(data.get("local")), data.get("alive"), data.get("cores"), int(data.get("lost_count") or 0),
                   lost, data.get("updated_ms"))


@dataclass
class ExecutorBook:
    """Which executors are alive and which were lost, from successive lists (no Spark involved).

    >>> book = ExecutorBook(local=False, since_ms=0)
    >>> book.update([ExecutorRecord("driver"), ExecutorRecord("0", cores=2), ExecutorRecord("1", cores=2)], 1000)
    True
    >>> book.update([ExecutorRecord("driver"), ExecutorRecord("0", cores=2)], 2000)
    True
    >>> r = book.report; (r.alive, r.cores, r.lost_count, r.lost[0].id, r.lost[0].lost_ms)
    (1, 2, 1, '1', 2000)
    """

    local: bool
    since_ms: int
    alive: dict[str, ExecutorRecord] = field(default_factory=dict)
    lost_ids: set[str] = field(default_factory=set)
    lost: list[LostExecutor] = field(default_factory=list)
    report: ExecutorReport = field(default_factory=ExecutorReport)

    def __post_init__(self) -> None:
        self.report = dataclasses.replace(self.report, local=self.local)

    def _runs_tasks(self, record: ExecutorRecord) -> bool:
        return (record.id == DRIVER) == self.local

    def _lose(self, record: ExecutorRecord, when_ms: int) -> None:
        self.lost_ids.add(record.id)
        self.lost.append(LostExecutor(record.id, record.host_port, when_ms, record.reason))
        del self.lost[:-KEEP_LOST]

    def update(self, records: list[ExecutorRecord], now_ms: int) -> bool:
        """Take in Spark's current list; True when the report changed (count, cores or a loss)."""
        alive = {r.id: r for r in records if r.active and self._runs_tasks(r)}
        for r in records:  # removed, as Spark says: seen alive by us, or removed since the watch began
            if (not r.active and self._runs_tasks(r) and r.id not in self.lost_ids
                    and (r.id in self.alive or (r.removed_ms or now_ms) >= self.since_ms)):
                self._lose(r, r.removed_ms or now_ms)
        for gone in self.alive.keys() - alive.keys() - self.lost_ids:  # no longer listed at all
            self._lose(self.alive[gone], now_ms)
        self.alive = alive
        cores = [r.cores for r in alive.values()]
        report = ExecutorReport(self.local, len(alive), None if None in cores else sum(cores),  # type: ignore[arg-type]
                                len(self.lost_ids), tuple(self.lost), self.report.updated_ms)
        if report == self.report:
            return False
        self.report = dataclasses.replace(report, updated_ms=now_ms)
        return True


def spark_time_ms(text: str | None) -> int | None:
    """A date of Spark's REST API (``2026-11-22T13:50:02.114GMT``) as epoch milliseconds.

    >>> spark_time_ms("1970-01-01T00:00:01.500GMT"), spark_time_ms(None)
    (1500, None)
    """
    if not text:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.removesuffix("GMT").removesuffix("Z"))
    except ValueError:
        return None
    return int(parsed.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


def parse_executors(text: str) -> list[ExecutorRecord]:
    """Spark's executor list in its REST API's JSON form (``allexecutors``) as records.

    >>> parse_executors('[{"id": "1", "hostPort": "h:1", "isActive": false, "totalCores": 2,'
    ...                 ' "removeTime": "1970-01-01T00:00:02.000GMT", "removeReason": "Worker lost"}]')
    [ExecutorRecord(id='1', host_port='h:1', active=False, cores=2, removed_ms=2000, reason='Worker lost')]
    """
    return [ExecutorRecord(str(e.get("id")), str(e.get("hostPort") or ""), bool(e.get("isActive", True)),
                           e.get("totalCores"), spark_time_ms(e.get("removeTime")), e.get("removeReason"))
            for e in json.loads(text)]


def status_store_reader(spark: Any) -> Reader:
    """Reads Spark's status store (the UI's data, kept with the UI off) as JSON in one JVM call.

    >>> [r.id for r in status_store_reader(spark)()]  # doctest: +SKIP
    ['driver', '0', '1']
    """
    cache: dict[str, Any] = {}

    def read() -> list[ExecutorRecord]:
        if not cache:  # looked up on the first read, so that building a reader never fails
            sc = spark.sparkContext
            cache.update(sc=sc._jsc.sc(), mapper=sc._jvm.org.apache.spark.status.api.v1.JacksonMessageWriter().mapper())
        return parse_executors(cache["mapper"].writeValueAsString(cache["sc"].statusStore().executorList(False)))

    return read


def scheduler_reader(spark: Any, local: bool) -> Reader:
    """The fallback: the scheduler's executor ids (a cluster), or the driver with local[N]'s cores.

    >>> scheduler_reader(spark, local=True)()  # doctest: +SKIP
    [ExecutorRecord(id='driver', host_port='', active=True, cores=2, removed_ms=None, reason=None)]
    """
    sc = spark.sparkContext

    def read() -> list[ExecutorRecord]:
        if local:
            return [ExecutorRecord(DRIVER, cores=sc.defaultParallelism)]
        ids = sc._jsc.sc().getExecutorIds()
        return [ExecutorRecord(str(ids.apply(i))) for i in range(ids.size())]

    return read


def first_working(*readers: Reader) -> Reader:
    """A reader that uses the first of ``readers`` that answers, and sticks to it once it has.

    >>> [r.id for r in first_working(lambda: 1 / 0, lambda: [ExecutorRecord("0")])()]
    ['0']
    """
    chosen: list[Reader] = []

    def read() -> list[ExecutorRecord]:
        if chosen:
            return chosen[0]()
        failures = []
        for reader in readers:
            try:
                records = reader()
            except Exception as exc:  # noqa: BLE001 — try the next route
                failures.append(exc)
                continue
            chosen.append(reader)
            return records
        raise RuntimeError("; ".join(" ".join(str(e).split())[:200] for e in failures))

    return read


def is_local_master(master: str) -> bool:
    """Whether tasks run in the driver (``local``, ``local[4]``), not in executors (``local-cluster``, …).

    >>> is_local_master("local[2]"), is_local_master("local-cluster[2,1,1024]"), is_local_master("spark://h:7077")
    (True, False, False)
    """
    return master == "local" or master.startswith("local[")


class ExecutorWatch:
    """Keeps an ``ExecutorReport`` fresh: ``poll`` reads Spark at most every ``interval_s``, never raises.

    ``on_change(report)`` is called (under the watch's lock) when the report changed.

    >>> watch = ExecutorWatch(lambda: [ExecutorRecord("driver", cores=2)], local=True)
    >>> watch.poll().short()
    'executors: local (the driver), 2 cores'
    """

    def __init__(self, read: Reader | None, local: bool, since_ms: int | None = None, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.time,
                 on_change: Callable[[ExecutorReport], None] | None = None) -> None:
        self._read, self.interval_s, self.clock, self.on_change = read, interval_s, clock, on_change
        self.book = ExecutorBook(local, int(clock() * 1000) if since_ms is None else since_ms)
        self._lock = threading.Lock()
        self._last: float | None = None

    @classmethod
    def for_session(cls, spark: Any, **kwargs: Any) -> ExecutorWatch:
        """The watch of a SparkSession (None: a watch that knows nothing, for runs without Spark)."""
        if spark is None:
            return cls(None, local=True, **kwargs)
        try:
            local = is_local_master(spark.sparkContext.master)
        except Exception as exc:  # noqa: BLE001 — the watch must never stop a run
            log.debug("executors: master unknown: %s", exc)
            return cls(None, local=False, **kwargs)
        return cls(first_working(status_store_reader(spark), scheduler_reader(spark, local)), local, **kwargs)

    @property
    def report(self) -> ExecutorReport:
        return self.book.report

    def poll(self, force: bool = False) -> ExecutorReport:
        """The current report, read from Spark first if the last read is ``interval_s`` old (or ``force``).

        A poll while another is under way returns the last report at once rather than wait.
        """
        if self._read is None or (not force and not self._due()):
            return self.report
        if not self._lock.acquire(blocking=force):
            return self.report
        try:
            if force or self._due():
                self._last = self.clock()
                self._update()
        finally:
            self._lock.release()
        return self.report

    def _due(self) -> bool:
        return self._last is None or self.clock() - self._last >= self.interval_s

    def _update(self) -> None:
        try:
            changed = self.book.update(self._read(), int(self.clock() * 1000))  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 — a stopped session, a changed Spark: no figure, no failure
            log.debug("executors: cannot read Spark's executor list: %s", exc)
            return
        if changed and self.on_change is not None:
            try:
                self.on_change(self.book.report)
            except Exception as exc:  # noqa: BLE001
                log.debug("executors: on_change failed: %s", exc)


def save_report(state_dir: Path, report: ExecutorReport, running: bool) -> None:
    """Write ``executors.json`` into an existing state directory (atomically) for ``speedlayer status``.

    Never raises (a full disk is the checkpoints' to report); an unknown report is not written.

    >>> save_report(Path("state/fleet"), watch.report, running=True)  # doctest: +SKIP
    """
    target = Path(state_dir) / EXECUTORS_FILE
    if report.alive is None or not target.parent.is_dir():
        return
    temp = target.with_name(f".{EXECUTORS_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
    data = {**report.as_dict(), "running": running, "written_ms": int(time.time() * 1000)}
    try:
        temp.write_text(json.dumps(data, indent=2))
        os.replace(temp, target)
    except Exception as exc:  # noqa: BLE001 — never the run's end
        log.debug("executors: cannot write %s: %s", target, exc)
    finally:
        temp.unlink(missing_ok=True)


def status_lines(state_dir: Path) -> list[str]:
    """What ``speedlayer status`` prints about the executors of the run in ``state_dir`` ([] if none recorded).

    >>> status_lines(Path("state/fleet"))  # doctest: +SKIP
    ['executors 2 (1 lost), 4 cores (since 2026-11-22T13:50:02.114Z)',
     '  lost executor 1 on 10.0.0.5:40123 at 2026-11-22T13:50:02.114Z: Worker lost']
    """
    try:
        data = json.loads((Path(state_dir) / EXECUTORS_FILE).read_text())
        report = ExecutorReport.from_dict(data)
    except (OSError, ValueError, TypeError, AttributeError):
        return []
    when = (f"when the run stopped, {iso(data.get('written_ms'))}" if data.get("running") is False
            else f"since {iso(report.updated_ms) or '-'}")
    lines = [f"{report.short()} ({when})"]
    for lost in report.lost:
        where = f" on {lost.host_port}" if lost.host_port else ""
        lines.append(f"  lost executor {lost.id}{where} at {iso(lost.lost_ms)}: {lost.reason or 'no longer listed'}")
    if report.lost_count > len(report.lost):
        lines.append(f"  ... and {report.lost_count - len(report.lost)} lost before them")
    return lines
