"""What a long run keeps, bounded: RocksDB's memory, the batches a checkpoint retains, and a warning
when the checkpoints or the state's memory pass the bound a user set.

``bounds_conf`` is the Spark side (the session's settings); ``BoundsWatch`` is told of every
committed batch and warns in one line, once per crossing, measuring the checkpoints on disk at
most every ``CHECK_EVERY_S`` seconds (a walk of their directories).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.core.sizes import human_size, parse_size, tree_size

#: RocksDB's memory (block cache, write buffers, index and filter blocks) for all the state stores of
#: one JVM together: Spark's own default total, which Spark leaves unbounded unless asked
DEFAULT_MAX_STATE_MEMORY = "500m"
#: batches whose offsets, commits and state versions a checkpoint keeps (Spark's default: 100)
DEFAULT_RETAIN_BATCHES = 20
#: at most one walk of the checkpoints in this many seconds
CHECK_EVERY_S = 10.0

BOUNDED_MEMORY = "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"
MAX_MEMORY_MB = "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"
MIN_BATCHES_TO_RETAIN = "spark.sql.streaming.minBatchesToRetain"
DRIVER_MEMORY = "spark.driver.memory"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: the driver's heap when nobody sets spark.driver.memory (the sessions' default)
DEFAULT_DRIVER_MEMORY = "2g"


def state_memory_mb(max_state_memory: str) -> int:
    """``--max-state-memory`` in whole MiB, as Spark's ``maxMemoryUsageMB`` takes it.

    >>> state_memory_mb("1g"), state_memory_mb("500m")
    (1024, 500)
    """
    size = parse_size(max_state_memory, "--max-state-memory")
    if size < 1 << 20:
        raise ConfigError(f"--max-state-memory {max_state_memory} is under 1m: give at least 1m (e.g. 256m, 1g)")
    return size >> 20


#: touch every page of the heap at start, so that it is resident from the first minute
PRE_TOUCH = "-XX:+AlwaysPreTouch"


def heap_up_front(conf: Mapping[str, str], default_memory: str = DEFAULT_DRIVER_MEMORY) -> dict[str, str]:
    """``conf`` with the driver's heap committed and resident at its maximum from the start (``-Xms``
    equal to ``spark.driver.memory``, every page touched), ahead of the user's own Java options, which win.

    The JVM starts with a small heap and commits more as its live set asks, and a committed page
    becomes resident only when first used, so a run's resident memory would creep up to the heap's
    maximum over its first half hour; touched up front, it is at its level from the start.

    >>> heap_up_front({"spark.driver.memory": "4g"})[DRIVER_JAVA_OPTIONS]
    '-Xms4096m -XX:+AlwaysPreTouch'
    >>> heap_up_front({DRIVER_JAVA_OPTIONS: "-Dx=1", "spark.driver.memory": "3072"})[DRIVER_JAVA_OPTIONS]
    '-Xms3072m -XX:+AlwaysPreTouch -Dx=1'
    """
    memory = str(conf.get(DRIVER_MEMORY, default_memory)).strip()
    mb = int(memory) if memory.isdigit() else parse_size(memory, DRIVER_MEMORY) >> 20  # Spark reads a bare number as MiB
    return {**conf, DRIVER_JAVA_OPTIONS: f"-Xms{mb}m {PRE_TOUCH} {conf.get(DRIVER_JAVA_OPTIONS, '')}".strip()}


def check_retain_batches(count: int) -> int:
    """``--retain-batches``: at least 1 (a restart needs the last committed batch)."""
    if count < 1:
        raise ConfigError(f"--retain-batches {count}: give 1 or more (a restart needs the last committed batch)")
    return count


def bounds_conf(max_state_memory: str = DEFAULT_MAX_STATE_MEMORY,
                retain_batches: int = DEFAULT_RETAIN_BATCHES) -> dict[str, str]:
    """The Spark settings that bound a run's state memory and checkpoint retention.

    >>> bounds_conf("1g", 5)[MAX_MEMORY_MB], bounds_conf("1g", 5)[MIN_BATCHES_TO_RETAIN]
    ('1024', '5')
    """
    return {BOUNDED_MEMORY: "true", MAX_MEMORY_MB: str(state_memory_mb(max_state_memory)),
            MIN_BATCHES_TO_RETAIN: str(check_retain_batches(retain_batches))}


class BoundsWatch:
    """Warns once per crossing when the checkpoints pass ``max_checkpoint_bytes`` or the state's memory,
    as Spark's progress reports it (``stateOperators[].memoryUsedBytes``, the newest batch of each
    query, summed), passes ``max_state_bytes``. Either bound may be None (not watched). Where RocksDB's
    memory is bounded, all stores share one cache and Spark reports each store's even share of what
    the cache holds, so the sum over the run's queries is the cache's use, as it is when unbounded.

    >>> watch = BoundsWatch([Path("state/checkpoints/windows")], 1 << 30, None, print)  # doctest: +SKIP
    >>> tracker.subscribe(watch.batch_committed)  # doctest: +SKIP
    """

    def __init__(self, checkpoints: Sequence[Path], max_checkpoint_bytes: int | None, max_state_bytes: int | None,
                 notify: Callable[[str], None], every_s: float = CHECK_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.checkpoints = list(dict.fromkeys(checkpoints))
        self.max_checkpoint_bytes, self.max_state_bytes = max_checkpoint_bytes, max_state_bytes
        self._notify, self._every_s, self._clock = notify, every_s, clock
        self._checked_at: float | None = None
        self._memory: dict[str, int] = {}
        self._over = {"checkpoint": False, "memory": False}
        self._lock = threading.Lock()

    def batch_committed(self, metrics: Any) -> None:
        """Told after each committed batch (``ProgressTracker.subscribe``)."""
        with self._lock:
            if self.max_state_bytes is not None:
                self._memory[metrics.query] = sum(op.memory_bytes for op in metrics.state)
                used = sum(self._memory.values())
                if self._crossed("memory", used > self.max_state_bytes):
                    self._notify(f"the state's memory is {human_size(used)} (stateOperators' memoryUsedBytes), over "
                                 f"--max-state-memory {human_size(self.max_state_bytes)}: give more with --max-state-memory "
                                 f"(and keep {BOUNDED_MEMORY} on), or keep less state: a shorter watermark or "
                                 "shorter windows")
            now = self._clock()
            if self.max_checkpoint_bytes is None or (self._checked_at is not None
                                                     and now - self._checked_at < self._every_s):
                return
            self._checked_at = now
            size = sum(tree_size(path) for path in self.checkpoints)
            if self._crossed("checkpoint", size > self.max_checkpoint_bytes):
                self._notify(f"the run's checkpoints hold {human_size(size)} on disk, over --max-checkpoint-size "
                             f"{human_size(self.max_checkpoint_bytes)}: lower --retain-batches, shorten the watermark "
                             "or the windows (less state), or give the state directory a bigger disk")

    def _crossed(self, bound: str, over: bool) -> bool:
        """Whether ``bound`` is passed now and was not at the last look (once per crossing)."""
        crossed = over and not self._over[bound]
        self._over[bound] = over
        return crossed
