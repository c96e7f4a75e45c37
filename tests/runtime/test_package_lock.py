"""Two Spark starts fetching the same packages into an empty Ivy cache at once both get them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from speedlayer.runtime.package_lock import LOCK_NAME

pytestmark = pytest.mark.slow

#: a session fetching Spark's Kafka connector into the Ivy home given as its second argument
START = """
import sys
from pathlib import Path
from speedlayer.sources.kafka_connector import connector_package
from speedlayer.testing import local_session

spark = local_session(log_file=Path(sys.argv[1]) / "spark.log", conf={"spark.jars.ivy": sys.argv[2]},
                      packages=[connector_package()])
print("started with", spark.sparkContext.getConf().get("spark.jars"))
spark.stop()
"""


def test_two_sessions_starting_together_on_an_empty_cache_both_fetch_their_packages(tmp_path):
    # without the lock both fail, every time tried: Ivy moves each download into place from a ".part" file
    # the other process has already moved or truncated
    ivy, starts = tmp_path / "ivy", []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        starts.append(subprocess.Popen([sys.executable, "-c", START, str(tmp_path / name), str(ivy)], text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for name, start in zip(("first", "second"), starts, strict=True):
        output, _ = start.communicate(timeout=300)
        assert start.returncode == 0 and "spark-sql-kafka-0-10" in output, (name, output[-2000:])
    assert (ivy / LOCK_NAME).exists()
