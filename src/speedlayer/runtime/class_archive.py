"""A class-data archive for Spark's driver JVM: the classes a run loads, mapped from one file at start.

Without it the JVM reads and verifies some 14,000 classes from Spark's jars at every start.
``speedlayer warm-up`` writes the archive once per PySpark install and Java (``make run`` and
``make test`` call it); every Spark session speedlayer starts then passes it to the JVM. A JVM whose
class path or build differs from the archive's starts without it, silently, as it would anyway.

>>> class_archive_options()  # doctest: +SKIP
'-XX:SharedArchiveFile=/home/me/.cache/speedlayer/jvm/spark-4.1.0-1f2e3d4c5b6a.jsa -Xshare:auto -Xlog:cds=off'
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from speedlayer.core.errors import EnvironmentProblem
from speedlayer.runtime.processes import java_child

#: what the recording run does: a bounded fleet job, so a real run's classes are in the archive
RECORDED_RUN = ("run", "fleet", "--max-events", "3000", "--no-live", "--spark-ui", "off",
                "--source", "generator://?rate=3000&vehicles=200&seed=1")


def cache_dir() -> Path:
    """Where archives are kept: ``$XDG_CACHE_HOME/speedlayer/jvm``, else ``~/.cache/speedlayer/jvm``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "speedlayer" / "jvm"


def java_binary() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH; None when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(java).resolve() if java and Path(java).exists() else None


def archive_path() -> Path | None:
    """The archive for this PySpark install and this Java (whether written yet or not); None without Java."""
    import pyspark

    java = java_binary()
    if java is None:
        return None
    spark_home = Path(pyspark.__file__).resolve().parent
    jars = sorted(p.name for p in (spark_home / "jars").glob("*.jar"))
    key = hashlib.sha256(json.dumps([str(java), java.stat().st_mtime_ns, str(spark_home), jars]).encode()).hexdigest()
    return cache_dir() / f"spark-{pyspark.__version__}-{key[:12]}.jsa"


def class_archive_options() -> str:
    """The driver JVM's options that map the archive, or "" while there is none.

    ``-Xshare:auto`` starts without it when it does not fit; ``-Xlog:cds=off`` keeps that quiet.
    """
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off" if path and path.is_file() else ""


def write_class_archive(force: bool = False, recorded_run: Sequence[str] = RECORDED_RUN) -> Path:
    """Record the classes a run loads (``recorded_run``, CLI arguments), then dump them into the archive; its path.

    Takes about a minute on 2 cores, once; a no-op when the archive exists (``force`` writes it again).

    >>> write_class_archive()  # doctest: +SKIP
    PosixPath('/home/me/.cache/speedlayer/jvm/spark-4.1.0-1f2e3d4c5b6a.jsa')
    """
    path = archive_path()
    if path is None:
        raise EnvironmentProblem("no Java found for the class archive: install Java 17+ or set JAVA_HOME")
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="speedlayer-warm-up-") as work:
        classes = Path(work) / "classes.lst"
        recording = [sys.executable, "-m", "speedlayer", *recorded_run, "--state-dir", str(Path(work) / "state"),
                     "--conf", f"spark.driver.extraJavaOptions=-XX:DumpLoadedClassList={classes}"]
        java, class_path = _record(recording, Path(work))
        partial = path.with_suffix(f".{os.getpid()}.partial")
        dump = [java, "-Xshare:dump", f"-XX:SharedClassListFile={classes}", f"-XX:SharedArchiveFile={partial}",
                "-cp", class_path]
        done = subprocess.run(dump, capture_output=True, text=True, timeout=900)
        _must(done.returncode, done.stderr or done.stdout, "dumping the archive")
        os.replace(partial, path)  # whole or not at all: a JVM starting meanwhile sees no half-written file
    return path


def _must(returncode: int, output: str, doing: str) -> None:
    if returncode != 0:
        last = output.strip().splitlines()[-1:] or ["(no output)"]
        raise EnvironmentProblem(f"warm-up failed {doing} (exit {returncode}): {last[0]}; "
                                 "runs still work, only their Spark starts slower")


def _record(command: list[str], work: Path) -> tuple[str, str]:
    """Run ``command`` (a bounded run) to its end; the executable and class path of the JVM it started."""
    log = work / "recording.log"
    with log.open("w") as out:
        run = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=work)
        java = None
        while run.poll() is None:
            java = java or java_child(run.pid)
            time.sleep(0.2)
    _must(run.returncode, log.read_text(), "recording a run")
    if java is None:
        raise EnvironmentProblem("warm-up saw no Spark JVM start (it reads Linux's /proc): runs still work, "
                                 "only their Spark starts slower")
    return java
