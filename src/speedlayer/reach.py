"""Is a local directory shared with a cluster's executors? Checked before a run starts, not in its first batch.

On a cluster, executors write the state stores under the checkpoints, read a landing directory
and write Parquet files. A path on the driver's own disk is a different, empty directory on every
other machine: the run would fail late, or worse, each executor would keep its own state. So for
a cluster master every local path a run shares with executors is probed: the driver writes a token
file, then tasks on the executors read it and write one of their own. A machine that cannot is
named, with the fix. ``hdfs://``-like URIs are not probed (they are shared by nature).

>>> shared_places({"--state-dir": Path("/x")}, {}).keys()
dict_keys(['--state-dir'])
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Iterator, Mapping

from speedlayer.errors import ConfigError

PROBE_PREFIX = ".speedlayer-reach-"
FIX = ("on a cluster every machine must see these at the same path: put them on shared storage mounted "
       "everywhere (e.g. NFS), or run with --master local[*]")


def shared_places(*groups: Mapping[str, Path]) -> dict[str, Path]:
    """The places of several components in one mapping (what -> path), first naming wins."""
    merged: dict[str, Path] = {}
    for group in groups:
        for what, path in group.items():
            merged.setdefault(what, path)
    return merged


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
        found = (spark.sparkContext.parallelize(range(tasks), tasks)
                 .mapPartitions(lambda _: _look(probes, token)).collect())
    finally:
        for probe in probes.values():
            Path(probe).unlink(missing_ok=True)
    problems = sorted({(problem, what, host) for what, host, problem in found if problem})
    if problems:
        problem = problems[0][0]
        hosts = sorted({host for p, _, host in problems if p == problem})
        places_hit = [f"{what} {places[what]}" for what in dict.fromkeys(w for p, w, _ in problems if p == problem)]
        raise ConfigError(f"an executor on {', '.join(hosts)} {problem}: {', '.join(places_hit)}; {FIX}")
