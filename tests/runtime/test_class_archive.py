"""The class archive: written by warm-up, mapped by the JVM of every session speedlayer starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from speedlayer.runtime.class_archive import archive_path, class_archive_options, write_class_archive


def test_without_an_archive_the_jvm_gets_no_option(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = archive_path()
    assert path is not None and path.parent == tmp_path / "speedlayer" / "jvm" and path == archive_path()
    assert class_archive_options() == ""
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert class_archive_options() == f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off"


SESSION_LOADS = textwrap.dedent("""
    import sys
    from speedlayer.runtime.session import build_session

    spark = build_session("local[1]", {"spark.ui.enabled": "false",
                                       "spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={sys.argv[1]}"})
    print(spark.range(5).groupBy().count().collect()[0][0])
""")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_warm_up_writes_an_archive_that_a_sessions_jvm_loads_spark_from(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    run = ["run", "fleet", "--max-events", "200", "--no-live", "--spark-ui", "off", "--source",
           "generator://?rate=2000&vehicles=20&seed=1"]
    path = write_class_archive(recorded_run=run)
    assert path == archive_path() and path.stat().st_size > 50 * 2**20
    assert not list(path.parent.glob("*.partial"))
    assert write_class_archive(recorded_run=run).stat().st_mtime_ns == path.stat().st_mtime_ns  # once

    loads = tmp_path / "loads.log"
    done = subprocess.run([sys.executable, "-c", SESSION_LOADS, str(loads)], capture_output=True, text=True,
                          timeout=300, env=os.environ)
    assert done.returncode == 0 and done.stdout.strip() == "5", done.stderr[-3000:]
    # Spark's classes come from the archive; those it does not hold are lambdas and generated code
    spark_classes = [line for line in loads.read_text().splitlines() if " org.apache.spark." in line]
    shared = [line for line in spark_classes if "source: shared objects file" in line]
    assert len(shared) > 0.5 * len(spark_classes) > 1000, (len(shared), len(spark_classes))
