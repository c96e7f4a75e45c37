"""Shipping speedlayer and its Python dependencies to a cluster's executors.

On a cluster, the Python code of a job runs on executors too: the Redis and socket sources (Python
data sources), the sinks that write from partitions, the state processors, users' own code. Their
machines usually have Spark and a Python, nothing more. With ``--ship auto`` (the default for a
cluster master) speedlayer packs itself, the Python packages it needs (and any installed package
that depends on speedlayer, e.g. a user's plug-in) into one archive, cached by content, and hands
it to Spark's ``spark.archives``: every executor unpacks it into its working directory, and its
Python workers find it on ``PYTHONPATH``. Spark itself (pyspark, py4j) is not shipped: executors
run the pyspark of their own Spark.

The executors' interpreter is ``python3.X``, the same minor version as the driver (compiled
packages such as pyarrow are built for one), looked up on each machine's PATH; the driver's own
Python workers (data source planning) find this interpreter first on the driver's PATH.
``--conf spark.pyspark.python=...`` names another interpreter.

>>> ship_plan({}, "none").env["PYSPARK_PYTHON"]  # doctest: +ELLIPSIS
'python3...'
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import importlib.util
import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from speedlayer.core.errors import ConfigError

#: directory name the archive is unpacked to in each executor's working directory
ALIAS = "speedlayer_env"
#: the executors' own Spark provides these
NOT_SHIPPED = {"pyspark", "py4j", "pip", "setuptools", "wheel"}
#: speedlayer's extras whose packages are shipped (when installed): its connectors
CONNECTOR_EXTRAS = ("redis", "postgres", "mysql", "kafka")
SHIP_MODES = ("auto", "none")
CACHE_ENV = "SPEEDLAYER_CACHE_DIR"


@dataclass(frozen=True)
class ShipPlan:
    """What a session adds for its executors: Spark settings, driver environment, one line to show."""

    conf: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    note: str | None = None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed() -> dict[str, metadata.Distribution]:
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            found.setdefault(_canonical(name), dist)
    return found


def _requirements(dist: metadata.Distribution, extras: Iterable[str]) -> Iterable[tuple[str, tuple[str, ...]]]:
    """(name, extras asked for) of what ``dist`` with ``extras`` requires, as pip would install it."""
    from packaging.requirements import InvalidRequirement, Requirement

    for line in dist.requires or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            yield req.name, tuple(req.extras)


def shipped_distributions(installed: Mapping[str, metadata.Distribution] | None = None) -> list[metadata.Distribution]:
    """speedlayer with its connectors, every installed package that depends on it, and what they need, less Spark's own.

    >>> "speedlayer" in [d.metadata["Name"] for d in shipped_distributions()]
    True
    """
    installed = installed if installed is not None else _installed()
    dependents = [name for name, dist in installed.items()
                  if any(_canonical(r) == "speedlayer" for r, _ in _requirements(dist, ()))]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo = [("speedlayer", CONNECTOR_EXTRAS), *((name, ()) for name in dependents)]
    while todo:
        name, extras = todo.pop()
        name = _canonical(name)
        if (name, extras) in seen or name not in installed:
            continue
        seen.add((name, extras))
        todo.extend(_requirements(installed[name], extras))
    names = {name for name, _ in seen} - NOT_SHIPPED
    return [installed[name] for name in sorted(names)]


def _top_level_paths(dist: metadata.Distribution) -> list[Path]:
    """Where an editable (or otherwise path-installed) distribution's top-level modules live."""
    names = (dist.read_text("top_level.txt") or "").split() or [_canonical(dist.metadata["Name"]).replace("-", "_")]
    paths = []
    for name in names:
        if name == "speedlayer":  # this package itself, wherever the import machinery would look now
            paths.append(Path(__file__).resolve().parents[1])
            continue
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            paths.extend(Path(p) for p in spec.submodule_search_locations)
        elif spec.origin:
            paths.append(Path(spec.origin))
    return paths


def _members(dist: metadata.Distribution) -> Iterable[tuple[Path, str]]:
    """(file on disk, name in the archive) of one distribution's importable files."""
    if _canonical(dist.metadata["Name"]) == "speedlayer":
        # this package from its own directory: a source tree's speedlayer.egg-info, when found first,
        # lists src/speedlayer/... paths that would not import on an executor
        yield from _tree(Path(__file__).resolve().parents[1])
        return
    files = [f for f in dist.files or [] if not str(f).startswith("..") and "__pycache__" not in f.parts]
    has_code = any(f.suffix in (".py", ".so") for f in files)
    if has_code:
        for f in files:
            path = Path(dist.locate_file(f))
            if path.is_file() and not str(f).endswith(".pth"):
                yield path, str(f)
        return
    for top in _top_level_paths(dist):  # editable: the package directory itself
        yield from _tree(top)


def _tree(top: Path) -> Iterable[tuple[Path, str]]:
    """(file, name in the archive) of a top-level module or package directory, bytecode left out."""
    if top.is_file():
        yield top, top.name
        return
    for path in sorted(top.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path, f"{top.name}/{path.relative_to(top)}"


def _fingerprint(members: list[tuple[Path, str]]) -> str:
    digest = hashlib.sha256(f"{sys.version_info[:2]}".encode())
    for path, name in members:
        stat = path.stat()
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "speedlayer")
    return Path(base)


def packed_environment(folder: Path | None = None) -> tuple[Path, int]:
    """The archive of ``shipped_distributions()``, built once per content; (path, number of packages)."""
    dists = shipped_distributions()
    members = [m for dist in dists for m in _members(dist)]
    folder = folder or cache_dir()
    archive = folder / f"env-{_fingerprint(members)}.tar.gz"

    def write(partial: Path) -> None:
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            for path, name in members:
                tar.add(path, arcname=name, recursive=False)

    cached_archive(archive, "env-*.tar.gz", write)
    return archive, len(dists)


def cached_archive(target: Path, pattern: str, write: Callable[[Path], None], kept: int = 3) -> Path:
    """``target``, written by ``write(partial)`` once per content: atomically (a crash leaves no half
    archive), then all but the ``kept`` newest files matching ``pattern`` beside it are removed
    (each edit of an editable install or a job module makes a new one).

    >>> cached_archive(Path("cache/env-1.tar.gz"), "env-*.tar.gz", write_tar)  # doctest: +SKIP
    """
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=target.parent, suffix=".partial")
    os.close(handle)
    try:
        write(Path(partial))
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    older = sorted((p for p in target.parent.glob(pattern) if p != target), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in older[kept - 1:]:
        stale.unlink(missing_ok=True)
    return target


def executor_python(conf: Mapping[str, str]) -> str:
    """The interpreter executors start: ``spark.pyspark.python``, else ``python3.X`` like the driver's."""
    return conf.get("spark.pyspark.python") or f"python{sys.version_info.major}.{sys.version_info.minor}"


def check_ship(ship: str) -> None:
    """Refuse a ``--ship`` that is neither a mode nor an existing archive, with the fix.

    >>> check_ship("auto"); check_ship("none")
    """
    if ship not in SHIP_MODES and not Path(ship).expanduser().is_file():
        raise ConfigError(f"--ship {ship}: no such archive; give auto, none, or a .tar.gz/.zip whose root holds "
                          "the packages to import (e.g. made with 'pip install --target DIR ...' and tar)")


def _archive(ship: str) -> tuple[Path, int | None]:
    if ship == "auto":
        return packed_environment()
    check_ship(ship)
    return Path(ship).expanduser().resolve(), None


def ship_plan(conf: Mapping[str, str], ship: str = "auto") -> ShipPlan:
    """Settings that give a cluster's executors speedlayer, its packages and a matching Python."""
    python = executor_python(conf)
    env = {"PYSPARK_PYTHON": python}
    if "spark.pyspark.python" not in conf:  # the driver's own Python workers run this interpreter
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if ship == "none":
        return ShipPlan(env=env, note=f"shipping nothing (--ship none): executors run {python}, which must import "
                                      "speedlayer and its packages")
    archive, count = _archive(ship)
    archives = ",".join(filter(None, [conf.get("spark.archives"), f"{archive}#{ALIAS}"]))
    pythonpath = os.pathsep.join(filter(None, [ALIAS, conf.get("spark.executorEnv.PYTHONPATH")]))
    what = f"speedlayer and {count - 1} Python packages" if count else "the archive"
    size_mb = archive.stat().st_size / 1e6
    return ShipPlan(conf={"spark.archives": archives, "spark.executorEnv.PYTHONPATH": pythonpath}, env=env,
                    note=f"shipping {what} to the executors ({archive}, {size_mb:,.0f} MB); they run {python}")
