"""One SparkSession for the whole test session; helpers shared by the suites."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from speedlayer.session import build_session

    log = tmp_path_factory.mktemp("spark-log") / "spark.log"
    session = build_session(
        "local[2]",
        {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
        app_name="speedlayer-tests",
        log_file=log,
    )
    yield session
    session.stop()


@pytest.fixture
def run_cli(tmp_path):
    """Run the speedlayer CLI in a subprocess (a fresh JVM), in ``tmp_path``."""
    import subprocess

    def _run(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "COLUMNS": "200"}
        return subprocess.run(
            [sys.executable, "-m", "speedlayer", *args],
            cwd=cwd or tmp_path, capture_output=True, text=True, timeout=timeout, env=env,
        )

    return _run
