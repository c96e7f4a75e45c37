"""Helpers for testing jobs beyond local mode: a Spark standalone cluster on this machine's loopback.

``StandaloneCluster`` starts a master and workers from the installed pyspark's own launcher
(``bin/spark-class``), each worker with its own cores, memory and work directory, and with an
environment that hides the current virtual environment: executors find speedlayer only if it is
shipped to them (``speedlayer.runtime.shipping``), as on a real cluster whose machines have nothing
installed. Run a job against ``cluster.url`` with ``--master``; kill a worker to test a lost machine.

>>> with StandaloneCluster(workers=2, cores=1, work_dir=tmp) as cluster:  # doctest: +SKIP
...     subprocess.run(["speedlayer", "run", "fleet", "--master", cluster.url, ...])
...     cluster.kill_worker(0)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from speedlayer.core.errors import EnvironmentProblem

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
LOOPBACK = "127.0.0.1"


def spark_home() -> Path:
    """The Spark that the installed pyspark carries (its ``bin/spark-class`` starts masters and workers)."""
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def bare_environment() -> dict[str, str]:
    """This process's environment without its virtual environment: what a machine with only Spark has.

    >>> "VIRTUAL_ENV" in bare_environment()
    False
    """
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON") and not k.startswith("SPARK_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": LOOPBACK})
    return env


@dataclass
class Worker:
    process: subprocess.Popen
    work_dir: Path
    log: Path

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class StandaloneCluster:
    """A master and ``workers`` workers on loopback, each with ``cores`` cores and ``memory`` of executor memory.

    ``java_options`` reach every JVM of the cluster, executors included (through ``JAVA_TOOL_OPTIONS``),
    e.g. ``-XX:TieredStopAtLevel=1``, which starts faster for tests that run small data.
    """

    def __init__(self, work_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g", start_timeout: float = 120.0,
                 java_options: str = ""):
        self.work_dir, self.cores, self.memory, self.timeout = Path(work_dir), cores, memory, start_timeout
        self.count = workers
        self.port = free_port()
        self.url = f"spark://{LOOPBACK}:{self.port}"
        self.env = bare_environment()
        if java_options:
            self.env["JAVA_TOOL_OPTIONS"] = java_options
        self.master: subprocess.Popen | None = None
        self.workers: list[Worker] = []

    def _spawn(self, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as out:
            return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> StandaloneCluster:
        master_log = self.work_dir / "master.log"
        self.master = self._spawn([MASTER_CLASS, "--host", LOOPBACK, "--port", str(self.port), "--webui-port",
                                   str(free_port())], master_log, self.env)
        for n in range(self.count):
            self.add_worker(n)
        self.wait_for_workers(self.count)
        return self

    def add_worker(self, n: int) -> Worker:
        """Start worker ``n`` (a new one, or in place of a killed one); ``wait_for_workers`` sees it register."""
        work = self.work_dir / f"worker-{n}"
        env = {**self.env, "SPARK_WORKER_DIR": str(work)}
        log = self.work_dir / f"worker-{n}-{len(self.workers)}.log"
        process = self._spawn([WORKER_CLASS, "--host", LOOPBACK, "--cores", str(self.cores), "--memory", self.memory,
                               "--webui-port", str(free_port()), "--work-dir", str(work), self.url], log, env)
        worker = Worker(process, work, log)
        if n < len(self.workers):
            self.workers[n] = worker
        else:
            self.workers.append(worker)
        return worker

    def replace_worker(self, n: int) -> None:
        """Start a new worker in place of killed worker ``n`` and wait until the master has it."""
        before = self.registered()
        self.add_worker(n)
        self.wait_for_workers(before + 1)

    def registered(self) -> int:
        """Workers the master has registered so far (from its log)."""
        log = self.work_dir / "master.log"
        return log.read_text(errors="replace").count("Registering worker") if log.is_file() else 0

    def wait_for_workers(self, count: int) -> None:
        deadline = time.monotonic() + self.timeout
        while self.registered() < count:
            if self.master is None or self.master.poll() is not None or time.monotonic() > deadline:
                tail = (self.work_dir / "master.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise EnvironmentProblem(f"the standalone cluster did not start ({self.registered()} of {count} workers "
                                         f"registered); master log:\n{tail}")
            time.sleep(0.2)

    def kill_worker(self, n: int) -> None:
        """SIGKILL worker ``n`` and everything it started (its executors and their Python workers): a lost machine."""
        below = [pid for pid, _ in descendants(self.workers[n].process.pid)]
        _kill_group(self.workers[n].process)
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def worker_of(self, pid: int) -> int | None:
        """The number of the worker that ``pid`` (an executor or one of its Python workers) runs under."""
        for n, worker in enumerate(self.workers):
            if pid in {p for p, _ in descendants(worker.process.pid)}:
                return n
        return None

    def stop(self) -> None:
        for worker in self.workers:
            _kill_group(worker.process)
        if self.master is not None:
            _kill_group(self.master)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def processes() -> list[tuple[int, int, int, str]]:
    """(pid, parent pid, process group, state) of every process, from /proc (Linux)."""
    table = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        table.append((int(entry), int(fields[1]), int(fields[2]), fields[0]))
    return table


def descendants(root: int) -> list[tuple[int, int]]:
    """(pid, process group) of every living process below ``root``."""
    children: dict[int, list[tuple[int, int]]] = {}
    for pid, ppid, pgid, state in processes():
        if state != "Z":
            children.setdefault(ppid, []).append((pid, pgid))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        pass
