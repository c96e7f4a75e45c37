"""The memory allocator of the JVM speedlayer starts: jemalloc where it is installed, else the system's malloc.

RocksDB, under every stateful query, allocates and frees native memory all the time (its block
cache's blocks, its write buffers). glibc's malloc keeps much of what it frees in its arenas, so a
long run's resident memory went on rising for an hour and a half after RocksDB's own use had
levelled off at its bound; with jemalloc it levels off with RocksDB's (docs/benchmarks.md, "Soak").
Flink's images preload jemalloc for the same reason. ``SPEEDLAYER_ALLOCATOR`` chooses:
``auto`` (the default: jemalloc when found), ``jemalloc`` (required: an error when missing) or
``system``. A ``LD_PRELOAD`` of the user's own is left as it is.

>>> allocator_env({"SPEEDLAYER_ALLOCATOR": "system"})
{}
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from speedlayer.core.errors import ConfigError

ALLOCATOR_ENV = "SPEEDLAYER_ALLOCATOR"
CHOICES = ("auto", "jemalloc", "system")
INSTALL_HINT = "install jemalloc (Debian and Ubuntu: sudo apt-get install libjemalloc2)"


def find_jemalloc() -> str | None:
    """The jemalloc shared library the dynamic linker would load (``libjemalloc.so.2``), or None."""
    if not sys.platform.startswith("linux"):
        return None  # LD_PRELOAD is the Linux loader's
    return ctypes.util.find_library("jemalloc")


def allocator_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment the JVM should start with for ``SPEEDLAYER_ALLOCATOR``: ``{"LD_PRELOAD": lib}`` or nothing.

    >>> allocator_env({"SPEEDLAYER_ALLOCATOR": "fast"})
    Traceback (most recent call last):
    speedlayer.core.errors.ConfigError: SPEEDLAYER_ALLOCATOR=fast: use auto (jemalloc when installed), jemalloc or system
    """
    choice = environ.get(ALLOCATOR_ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ConfigError(f"{ALLOCATOR_ENV}={environ[ALLOCATOR_ENV]}: use auto (jemalloc when installed), jemalloc or system")
    if choice == "system" or environ.get("LD_PRELOAD", "").strip():
        return {}
    library = find_jemalloc()
    if library is None:
        if choice == "jemalloc":
            raise ConfigError(f"{ALLOCATOR_ENV}=jemalloc but no jemalloc library was found: {INSTALL_HINT}, "
                              f"or set {ALLOCATOR_ENV}=system")
        return {}
    return {"LD_PRELOAD": library}


@contextmanager
def jvm_allocator() -> Iterator[dict[str, str]]:
    """While the JVM starts: the process environment it inherits holds ``allocator_env()``; removed after,
    so that nothing else this process starts inherits it.

    >>> with jvm_allocator() as added:  # builder.getOrCreate() goes here
    ...     ("LD_PRELOAD" in os.environ) == bool(added or os.environ.get("LD_PRELOAD"))
    True
    """
    added = allocator_env()  # only ever what the environment did not hold
    os.environ.update(added)
    try:
        yield added
    finally:
        for key in added:
            os.environ.pop(key, None)
