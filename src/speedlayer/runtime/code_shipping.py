"""Shipping a job's own code to the executors when no installed package carries it.

A job's Python functions (UDFs, per-batch steps, state processors) run in Python workers, which
must import the job's module. Which modules need shipping:

- a module of speedlayer, or of a package that the workers' Python already has, needs nothing:
  in local mode every installed package; on a cluster master (``--master spark://...``) with
  ``--ship auto``, the packages it packs (speedlayer's dependencies and every package that depends
  on speedlayer);
- any other module (a plain file or directory on ``sys.path``, e.g. ``speedlayer run
  orders_job:ORDERS`` from the directory holding ``orders_job.py``) is zipped, its whole top-level
  package, and added with ``SparkContext.addPyFile`` before the queries start: the workers put the
  zip on their ``sys.path``. Local mode does it too, since a Python worker does not see the
  driver's ``sys.path`` (only its environment);
- a module that cannot travel in a zip (compiled, or inside an archive) is refused before start
  with the fix; with ``--ship none`` on a cluster nothing is shipped and a note names what the
  executors must import themselves.

Functions defined in ``__main__`` (a script, a notebook) need nothing: Spark pickles them by value.

>>> plan_code_shipping(FLEET, "spark://h:7077", "auto")  # doctest: +SKIP
CodeShipping(py_files=(), note=None)
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import importlib.util
import re
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.session import is_local
from speedlayer.runtime.shipping import cache_dir, cached_archive, shipped_distributions

#: modules that never need shipping: the executors' own Python and Spark, and code pickled by value
NEVER_SHIPPED = frozenset({"speedlayer", "__main__", "builtins", "pyspark", "py4j", *sys.stdlib_module_names})


@dataclass(frozen=True)
class CodeShipping:
    """Zips to add with ``SparkContext.addPyFile`` before the queries start, and the line that says so."""

    py_files: tuple[Path, ...] = ()
    note: str | None = None


def job_modules(job) -> list[str]:
    """The top-level modules of a job's own functions (pipeline, decoder, per-batch steps), speedlayer's excluded.

    >>> job_modules(WORDCOUNT)  # doctest: +SKIP
    []
    """
    functions = [job.pipeline, job.decoder, job.check, *(o.per_batch for o in job.outputs.values())]
    tops = [getattr(f, "__module__", None) or "" for f in functions if f is not None]
    return sorted({name.partition(".")[0] for name in tops} - NEVER_SHIPPED - {""})


def installed_top_levels(names: Iterable[str] | None = None) -> set[str]:
    """Top-level modules of the installed distributions (only of those ``names``, when given)."""
    wanted = None if names is None else {_canonical(n) for n in names}
    return {top for top, dists in metadata.packages_distributions().items()
            if wanted is None or any(_canonical(d) in wanted for d in dists)}


def plan_code_shipping(job, master: str, ship: str, folder: Path | None = None,
                       available: Iterable[str] | None = None) -> CodeShipping:
    """What a run on ``master`` must add for the Python workers to import ``job``'s own modules.

    ``available`` are the top-level modules the workers import without help (default: those
    ``--ship auto`` packs on a cluster, else every installed one); ``folder`` is where zips are
    kept (default: speedlayer's cache).
    """
    modules = job_modules(job)
    local = is_local(master)
    if not modules:
        return CodeShipping()
    if not local and ship == "none":
        return CodeShipping(note=f"--ship none: executors must import {', '.join(modules)} (the job's code) themselves")
    if available is None:  # an archive given with --ship is taken to hold the installed packages it needs
        packed = [d.metadata["Name"] for d in shipped_distributions()] if not local and ship == "auto" else None
        available = installed_top_levels(packed)
    todo = [name for name in modules if name not in set(available)]
    if not todo:
        return CodeShipping()
    zips = tuple(zip_module(name, folder or cache_dir()) for name in todo)
    where = ", ".join(f"{name} ({_origin(name)})" for name in todo)
    return CodeShipping(zips, None if local else f"shipping the job's code {where} to the executors (addPyFile)")


def _origin(top: str) -> Path:
    """The file or directory a top-level module is imported from; refused if it cannot be zipped."""
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise ConfigError(f"the job's module {top} cannot be found: install it, or run from the directory that holds it")
    if spec.submodule_search_locations:
        places = [Path(p) for p in spec.submodule_search_locations]
        if len(places) == 1 and places[0].is_dir():
            return places[0]
    elif spec.origin and spec.origin.endswith(".py") and Path(spec.origin).is_file():
        return Path(spec.origin)
    raise ConfigError(f"the job's module {top} ({spec.origin or 'a namespace package'}) cannot be shipped to executors "
                      "as a zip: make it an installed package that depends on speedlayer (--ship auto ships it), "
                      "or install it on every executor and run with --ship none")


def _files(origin: Path) -> list[tuple[Path, str]]:
    """(file, name in the zip) of a module file or package directory, without caches."""
    if origin.is_file():
        return [(origin, origin.name)]
    return [(path, f"{origin.name}/{path.relative_to(origin).as_posix()}") for path in sorted(origin.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"]


def zip_module(top: str, folder: Path) -> Path:
    """A zip of a top-level module or package, built once per content (name, size, mtime of its files)."""
    members = _files(_origin(top))
    digest = hashlib.sha256(top.encode())
    for path, name in members:
        stat = path.stat()
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    target = folder / f"code-{top}-{digest.hexdigest()[:16]}.zip"

    def write(partial: Path) -> None:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, name in members:
                archive.write(path, name)

    return cached_archive(target, f"code-{top}-*.zip", write)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
