"""Seeing rows land in Spark's memory sink from outside the query, and what the run costs.

``LatencySink`` is speedlayer's ``memory:`` sink writing one column per output row: the moment
the row became due (``_due_ms``: the event's creation time for an event output, window end plus
watermark delay for a window output). ``SinkWatcher`` polls the sink's committed batches from the
driver every ``poll_s`` and stamps each new row with the wall clock when it first saw it:
``seen - due`` is the row's end-to-end latency, an upper bound on the real one by at most one poll
interval plus one py4j round trip. Rows become visible in the memory sink when a micro-batch
(or, in continuous mode, an epoch) commits, which is exactly "the sink committed".

Reading the sink goes through py4j to the JVM's ``MemorySink`` (``latestBatchId``,
``dataSinceBatch``), not through a Spark job, so watching does not take a core from the query.

The memory sink cannot resume from a checkpoint, which a scheduled available-now run must do:
there the output goes to ``LatencyParquetSink`` (speedlayer's Parquet sink, same single column)
and the watcher follows the file sink's commit log (``_spark_metadata``: a batch's files count
from the moment its log entry exists), reading the new files with pyarrow.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.uris import parse_uri
from speedlayer.sinks.memory import MemorySink
from speedlayer.sinks.parquet import ParquetSink

DUE = "_due_ms"


def due_column(output: str, watermark_ms: int) -> F.Column:
    """When a row of ``output`` is due: its event's creation, or its window's end plus the watermark delay."""
    if output == "windows":
        return F.unix_millis(F.col("window_end")) + F.lit(watermark_ms)
    return F.unix_millis(F.col("event_time"))


class LatencySink(MemorySink):
    """``memory:TABLE`` keeping only each row's due time (see the module docstring)."""

    def __init__(self, table: str, output: str, watermark_ms: int):
        super().__init__(parse_uri(f"memory:{table}", "sink URI"))
        self.output, self.watermark_ms = output, watermark_ms

    def records(self, df: DataFrame, target) -> DataFrame:
        return df.select(due_column(self.output, self.watermark_ms).alias(DUE))


class LatencyParquetSink(ParquetSink):
    """``parquet:DIR`` keeping only each row's due time, for runs that resume from their checkpoint."""

    def __init__(self, directory: Path, output: str, watermark_ms: int):
        super().__init__(parse_uri(f"parquet://{Path(directory).resolve()}", "sink URI"))
        self.output, self.watermark_ms = output, watermark_ms

    def records(self, df: DataFrame, target) -> DataFrame:
        return df.select(due_column(self.output, self.watermark_ms).alias(DUE))


def committed_files(directory: Path) -> set[str]:
    """Paths of the data files the file sink's commit log lists (plain and compacted entries)."""
    log = Path(directory) / "_spark_metadata"
    paths: set[str] = set()
    if not log.is_dir():
        return paths
    for entry in log.iterdir():
        if entry.name.startswith("."):
            continue
        try:
            lines = entry.read_text().splitlines()[1:]  # the first line is the log version, "v1"
        except OSError:
            continue
        paths.update(json.loads(line)["path"] for line in lines if line.strip())
    return paths


@dataclass
class Sample:
    """Rows seen in one poll: when, and their due times (epoch ms)."""

    seen_ms: float
    due_ms: list[int]


@dataclass
class Watched:
    samples: list[Sample] = field(default_factory=list)
    peak_rss_bytes: int = 0
    polls: int = 0
    cpu_s: float = 0.0

    def latencies_ms(self, due_from_ms: float = 0.0, due_until_ms: float = float("inf")) -> list[tuple[int, float]]:
        """(due ms, latency ms) of every row due in [due_from_ms, due_until_ms)."""
        return [(d, s.seen_ms - d) for s in self.samples for d in s.due_ms if due_from_ms <= d < due_until_ms]


def _parse_rows(text: str) -> list[int]:
    # Row.toString of a one-column row is "[123]"; mkString joins them with newlines.
    values = (line.strip().strip("[]") for line in text.splitlines())
    return [int(v) for v in values if v and v != "null"]


class SinkWatcher:
    """Polls the memory sinks of the queries handed to ``watch`` and samples process memory.

    >>> w = SinkWatcher(pids=[os.getpid()]); w.start(); w.watch(query); ...; result = w.stop()  # doctest: +SKIP
    """

    def __init__(self, pids: list[int], poll_s: float = 0.005, rss_every_s: float = 0.2):
        import psutil

        self.processes = [psutil.Process(p) for p in pids]
        self.poll_s, self.rss_every_s = poll_s, rss_every_s
        self.result = Watched()
        self._sinks: list[list] = []  # [jvm sink, last batch id seen]
        self._dirs: dict[Path, set[str]] = {}  # file sink directory -> data files already read
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-watch", daemon=True)

    def watch(self, query) -> None:
        """Follow a started query whose sink is a memory sink (a LatencySink)."""
        sink = query._jsq.streamingQuery().sink()
        with self._lock:
            self._sinks.append([sink, -1])

    def watch_files(self, directory: Path) -> None:
        """Follow a file sink's commit log (see the module docstring)."""
        with self._lock:
            self._dirs.setdefault(Path(directory), set())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Watched:
        self._stop.set()
        self._thread.join(timeout=30)
        self._poll_sinks()  # whatever committed in the last moment
        return self.result

    def _poll_sinks(self) -> None:
        with self._lock:
            sinks = list(self._sinks)
        for entry in sinks:
            sink, last = entry
            latest = sink.latestBatchId()
            if latest.isEmpty():
                continue
            batch = int(latest.get())
            if batch <= last:
                continue
            seen = time.time() * 1000
            rows = _parse_rows(sink.dataSinceBatch(last).mkString("\n"))
            entry[1] = batch
            if rows:
                self.result.samples.append(Sample(seen, rows))
        for directory, read in list(self._dirs.items()):
            new = committed_files(directory) - read
            if not new:
                continue
            seen = time.time() * 1000
            import pyarrow.parquet as pq

            rows = []
            for path in sorted(new):
                rows += [v for v in pq.read_table(path.removeprefix("file:"), columns=[DUE]).column(DUE).to_pylist()
                         if v is not None]
            read.update(new)
            if rows:
                self.result.samples.append(Sample(seen, rows))

    def _rss(self) -> int:
        total = 0
        for p in self.processes:
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 — a process that ended has no memory left to count
                pass
        return total

    def _loop(self) -> None:
        cpu0 = time.thread_time()
        next_rss = 0.0
        while not self._stop.is_set():
            self._poll_sinks()
            self.result.polls += 1
            now = time.monotonic()
            if now >= next_rss:
                self.result.peak_rss_bytes = max(self.result.peak_rss_bytes, self._rss())
                next_rss = now + self.rss_every_s
            self.result.cpu_s = time.thread_time() - cpu0  # kept current: the bench samples it mid-run
            self._stop.wait(self.poll_s)
        self.result.cpu_s = time.thread_time() - cpu0
