"""Is a local directory shared with a cluster's executors? Checked before a run starts, not in its first batch.

On a cluster, executors write the state stores under the checkpoints, read a landing directory
and write Parquet files. A path on the driver's own disk is a different, empty directory on every
other machine: the run would fail late, or worse, each executor would keep its own state. So for
a cluster master every local path a run shares with executors is probed: the driver writes a token
file, then tasks on the executors read it and write one of their own. A machine that cannot is
named, with the fix. ``hdfs://``-like URIs are not probed (they are shared by nature).

>>> check_reachable(spark, run_places(plan))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from speedlayer.core.errors import ConfigError, EnvironmentProblem

PROBE_PREFIX = ".speedlayer-reach-"
FIX = ("on a cluster every machine must see these at the same path: put them on shared storage mounted "
       "everywhere (e.g. NFS), or run with --master local[*]")


def run_places(plan) -> dict[str, Path]:
    """Every local path a run's executors read or write, what -> path: the state directory, and what
    its sources, sinks (by output) and job name (``shared_paths``)."""
    places: dict[str, Path] = {"--state-dir": plan.state_dir}
    for source in (plan.source, *plan.inputs.values()):
        places.update(source.shared_paths())
    for qp in plan.queries:
        places.update({f"{what} of output {qp.output.name}": path for what, path in qp.sink.shared_paths().items()})
    if plan.job.shared_paths is not None:
        places.update(plan.job.shared_paths(plan.params))
    return places


def _look(probes: dict[str, str], token: str) -> Iterator[tuple[str, str, str]]:
    """On an executor: (what, host, problem or '') for each probe file."""
    host = socket.gethostname()
    for what, probe in probes.items():
        try:
            with open(probe, encoding="utf-8") as handle:
                seen = handle.read()
        except OSError:
            seen = ""
        if seen != token:
            yield what, host, "cannot see"
            continue
        mine = f"{probe}-{host}-{os.getpid()}"
        try:
            with open(mine, "w", encoding="utf-8") as handle:
                handle.write(token)
            os.unlink(mine)
        except OSError as exc:
            yield what, host, f"cannot write in ({exc.strerror or exc})"
            continue
        yield what, host, ""


def executors_broken(exc: BaseException) -> EnvironmentProblem:
    """One line for executors whose Python cannot start or cannot import speedlayer.

    >>> str(executors_broken(RuntimeError("...ModuleNotFoundError: No module named 'speedlayer'...")))[:60]
    "the executors' Python cannot import speedlayer (No module na"
    """
    text = str(exc)
    missing = re.search(r"ModuleNotFoundError: (No module named '[^']+')", text)
    if missing:
        return EnvironmentProblem(f"the executors' Python cannot import speedlayer ({missing.group(1)}): with --ship auto "
                                  "(the default) speedlayer ships it; with --ship ARCHIVE the archive's root must hold "
                                  "speedlayer and its packages; with --ship none the executors must have them installed")
    program = re.search(r'Cannot run program "([^"]+)"', text)
    if program:
        return EnvironmentProblem(f"the executors cannot start {program.group(1)}: install that Python (the driver's "
                                  "minor version) on every worker, or name one with --conf spark.pyspark.python=PATH")
    line = next((ln.strip() for ln in text.splitlines() if "Error" in ln or "Exception" in ln), text.strip()[:300])
    return EnvironmentProblem(f"the executors could not run speedlayer's first task: {line[:300]}")


def check_reachable(spark, places: Mapping[str, Path]) -> None:
    """Refuse a run whose local ``places`` some executor cannot read and write, naming it and the host.

    >>> check_reachable(spark, {"--state-dir": Path("/shared/state")})  # doctest: +SKIP
    """
    if not places:
        return
    token = uuid.uuid4().hex
    probes: dict[str, str] = {}
    try:
        for what, path in places.items():
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f"{PROBE_PREFIX}{token}"
            probe.write_text(token, encoding="utf-8")
            probes[what] = str(probe)
        tasks = max(4, 2 * spark.sparkContext.defaultParallelism)
        try:
            found = (spark.sparkContext.parallelize(range(tasks), tasks)
                     .mapPartitions(lambda _: _look(probes, token)).collect())
        except Exception as exc:
            raise executors_broken(exc) from exc
    finally:
        for probe in probes.values():
            Path(probe).unlink(missing_ok=True)
    problems = sorted({(problem, what, host) for what, host, problem in found if problem})
    if problems:
        problem = problems[0][0]
        hosts = sorted({host for p, _, host in problems if p == problem})
        places_hit = [f"{what} {places[what]}" for what in dict.fromkeys(w for p, w, _ in problems if p == problem)]
        raise ConfigError(f"an executor on {', '.join(hosts)} {problem}: {', '.join(places_hit)}; {FIX}")
