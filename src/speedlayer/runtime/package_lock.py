"""One Spark start at a time fetches ``spark.jars.packages`` into a machine's Ivy cache.

Spark's resolver (Apache Ivy) downloads into a shared cache (``~/.ivy2.5.2`` unless ``spark.jars.ivy``
says otherwise) without locking it: two Spark starts that fetch the same packages into an empty
cache at once both fail ("impossible to move part file to definitive one"), as two jobs or two test
processes started together on a fresh machine do. speedlayer's sessions take an exclusive file lock
in that cache while their JVM starts; the second start then finds every jar in place.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

#: Spark 4's default Ivy home (``SparkSubmitUtils``), when ``spark.jars.ivy`` is not set
DEFAULT_IVY_HOME = Path.home() / ".ivy2.5.2"
LOCK_NAME = ".speedlayer-resolve.lock"


def ivy_home(conf: Mapping[str, str]) -> Path:
    """The Ivy home Spark resolves ``spark.jars.packages`` into for this configuration.

    >>> ivy_home({"spark.jars.ivy": "/tmp/ivy"})
    PosixPath('/tmp/ivy')
    """
    return Path(conf["spark.jars.ivy"]).expanduser() if conf.get("spark.jars.ivy") else DEFAULT_IVY_HOME


@contextmanager
def packages_fetched_one_at_a_time(conf: Mapping[str, str]) -> Iterator[None]:
    """Hold the Ivy cache's lock while a session with ``spark.jars.packages`` starts; without packages, nothing.

    >>> with packages_fetched_one_at_a_time({"spark.jars.packages": "g:a:1"}):  # doctest: +SKIP
    ...     spark = builder.getOrCreate()
    """
    if not conf.get("spark.jars.packages", "").strip():
        yield
        return
    home = ivy_home(conf)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_NAME, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, and by the kernel if this process dies
        yield
