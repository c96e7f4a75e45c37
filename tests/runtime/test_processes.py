"""The memory a run's processes hold, as the dashboard and /metrics show it, against ps's own figures."""

import os
import subprocess

from pyspark.sql import functions as F

from speedlayer.runtime.processes import run_memory


def ps_children(pid: int) -> dict[int, tuple[int, str]]:
    """pid -> (resident KiB, command line) of the children of ``pid``, as procps's ps reports them."""
    out = subprocess.run(["ps", "-ww", "-o", "pid=,rss=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return {int(p): (int(r), args) for p, r, args in (line.split(None, 2) for line in out.splitlines())}


def test_the_driver_jvm_and_its_python_workers_are_measured(spark):
    spark.range(4).select(F.udf(lambda x: x + 1, "long")("id")).collect()  # Python workers exist now
    memory = run_memory()
    [jvm_kib] = [rss for rss, args in ps_children(os.getpid()).values() if "org.apache.spark.deploy.SparkSubmit" in args]
    assert abs(memory.driver_jvm - jvm_kib * 1024) < 0.2 * jvm_kib * 1024  # resident memory moves a little
    assert memory.workers >= 1 and memory.python_workers > memory.workers * 10 * 2**20
    assert memory.driver_python > 10 * 2**20
