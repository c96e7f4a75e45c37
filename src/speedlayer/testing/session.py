"""One SparkSession for a test suite, with speedlayer's settings: what a ``conftest.py`` fixture returns."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def local_session(master: str = "local[2]", conf: Mapping[str, str] | None = None, app_name: str = "speedlayer-tests",
                  log_file: Path | None = None, packages: Sequence[str] = ()) -> Any:
    """A local SparkSession as ``speedlayer run`` builds one (UTC, RocksDB state), sized for tests: two
    shuffle partitions, no UI, Spark's log in a file (a temporary one unless given), not the terminal.
    ``packages`` are Maven coordinates of connectors to add (``spark.jars.packages``), e.g. Kafka's:

    >>> from speedlayer.sources.kafka_connector import connector_package
    >>> spark = local_session(packages=[connector_package()])  # doctest: +SKIP
    """
    from speedlayer.runtime.session import build_session

    settings = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **(conf or {})}
    log_file = log_file or Path(tempfile.mkdtemp(prefix="speedlayer-tests-")) / "spark.log"
    return build_session(master, settings, app_name=app_name, log_file=log_file, packages=packages)
