"""The memory a run's processes hold: the Python driver, the JVM it started, Spark's Python workers.

Read from Linux's ``/proc`` (resident memory, VmRSS); elsewhere every figure is None. The workers
are every Python process below the driver JVM (``pyspark.daemon`` and the workers it forks): forked
workers share pages, so their sum overstates what they take together.

>>> run_memory().driver_python > 0  # doctest: +SKIP
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: the driver JVM among a process's descendants (spark-submit's launcher is a short-lived java too)
DRIVER_CLASS = "org.apache.spark.deploy.SparkSubmit"


def status_fields(pid: int) -> dict[str, int]:
    """The numeric fields of ``/proc/<pid>/status`` by name (sizes in kB, as Linux gives them); {} once it is gone.

    >>> status_fields(os.getpid())["Threads"] >= 1
    True
    """
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = {}
    for name, _, value in (line.partition(":") for line in lines):
        first = value.split()[:1]
        if first and first[0].isdigit():
            fields[name] = int(first[0])
    return fields


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process (``/proc/<pid>/status``, VmRSS) in bytes; None once it is gone.

    >>> rss_bytes(os.getpid()) > 0
    True
    """
    kb = status_fields(pid).get("VmRSS")
    return None if kb is None else kb * 1024


def process_table() -> dict[int, tuple[int, str, list[str]]]:
    """pid -> (parent pid, command name, arguments) of every process."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            args = Path(f"/proc/{entry.name}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(rest[1]), name, args)
    return table


def descendants(pid: int, table: dict[int, tuple[int, str, list[str]]]) -> list[int]:
    """Every process below ``pid`` in ``table`` (pid -> (ppid, name, args)), breadth first.

    >>> descendants(1, {2: (1, "a", []), 3: (2, "b", []), 4: (9, "c", [])})
    [2, 3]
    """
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, (ppid, _, _) in table.items() if ppid in frontier]
        found += children
        frontier = children
    return found


def java_child(pid: int) -> tuple[str, str] | None:
    """The executable and class path of a JVM that ``pid`` started (Spark's, through spark-submit's exec)."""
    return next(((args[0], args[args.index("-cp") + 1]) for ppid, name, args in process_table().values()
                 if ppid == pid and name == "java" and "-cp" in args[:-1]), None)


def run_processes(driver_pid: int) -> dict:
    """The driver JVM below ``driver_pid`` (None before it starts) and Spark's Python workers below it."""
    table = process_table()
    below = descendants(driver_pid, table)
    jvm = next((p for p in below if table[p][1] == "java" and DRIVER_CLASS in table[p][2]), None)
    workers = [p for p in (descendants(jvm, table) if jvm else []) if table[p][1].startswith("python")]
    return {"jvm": jvm, "workers": workers}


@dataclass(frozen=True)
class RunMemory:
    """Resident bytes of each process of a run (None: not known here), and how many Python workers."""

    driver_python: int | None
    driver_jvm: int | None
    python_workers: int | None
    workers: int


def run_memory(driver_pid: int | None = None) -> RunMemory:
    """What this run's processes (below ``driver_pid``, by default this process) hold now."""
    pid = driver_pid or os.getpid()
    if not Path("/proc").is_dir():
        return RunMemory(None, None, None, 0)
    found = run_processes(pid)
    sizes = [r for r in map(rss_bytes, found["workers"]) if r is not None]
    return RunMemory(rss_bytes(pid), rss_bytes(found["jvm"]) if found["jvm"] else None, sum(sizes), len(sizes))
