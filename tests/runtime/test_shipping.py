"""What a cluster's executors are given: the packages shipped, the archive, the settings."""

from __future__ import annotations

import tarfile

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.shipping import ALIAS, packed_environment, ship_plan, shipped_distributions


def names() -> set[str]:
    return {d.metadata["Name"].lower().replace("_", "-") for d in shipped_distributions()}


def test_speedlayer_its_connectors_and_sparks_python_needs_are_shipped_but_not_spark_or_dev_tools():
    shipped = names()
    assert {"speedlayer", "pandas", "pyarrow", "redis", "psycopg", "pymysql", "grpcio", "protobuf"} <= shipped
    assert not shipped & {"pyspark", "py4j", "pip", "pytest", "playwright", "matplotlib", "hypothesis"}


def test_the_archive_holds_importable_packages_and_is_built_once(tmp_path):
    archive, count = packed_environment(tmp_path)
    assert count == len(shipped_distributions())
    with tarfile.open(archive) as tar:
        members = set(tar.getnames())
    assert {"speedlayer/__init__.py", "speedlayer/runtime/shipping.py", "pyarrow/__init__.py", "pandas/__init__.py"} <= members
    assert not any("__pycache__" in m or m.endswith(".pth") for m in members)
    built = archive.stat().st_mtime_ns
    assert packed_environment(tmp_path) == (archive, count) and archive.stat().st_mtime_ns == built


def test_a_cluster_session_gets_the_archive_on_the_executors_path_and_a_matching_python(tmp_path):
    archive = tmp_path / "mine.tar.gz"
    archive.write_bytes(b"")
    plan = ship_plan({"spark.archives": "other.zip#o", "spark.executorEnv.PYTHONPATH": "o"}, str(archive))
    assert plan.conf["spark.archives"] == f"other.zip#o,{archive}#{ALIAS}"
    assert plan.conf["spark.executorEnv.PYTHONPATH"].split(":") == [ALIAS, "o"]
    assert plan.env["PYSPARK_PYTHON"].startswith("python3.") and "PATH" in plan.env
    assert "shipping the archive" in plan.note


def test_a_chosen_interpreter_and_ship_none_are_respected():
    plan = ship_plan({"spark.pyspark.python": "/opt/py/bin/python3"}, "none")
    assert plan.conf == {} and plan.env == {"PYSPARK_PYTHON": "/opt/py/bin/python3"}
    assert "shipping nothing" in plan.note


def test_a_missing_archive_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="--ship /no/such.tar.gz: no such archive; give auto, none"):
        ship_plan({}, "/no/such.tar.gz")


def test_executors_that_cannot_import_or_start_python_get_one_line_with_the_fix():
    from speedlayer.runtime.reach import executors_broken

    trace = "Traceback...\nModuleNotFoundError: No module named 'speedlayer'\n\tat org.apache.spark..."
    assert "with --ship none the executors must have them installed" in str(executors_broken(RuntimeError(trace)))
    missing = executors_broken(RuntimeError('java.io.IOException: Cannot run program "python3.11": error=2'))
    assert str(missing).startswith("the executors cannot start python3.11: install that Python")
