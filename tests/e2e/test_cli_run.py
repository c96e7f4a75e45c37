"""The CLI end to end in a fresh process: a bounded run whose files equal a batch recomputation."""

import json
import os

from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.settings import RunSettings
from tests.helpers import batch_output, closed_windows


def readlink_spy(tmp_path, monkeypatch):
    """A ``readlink`` first on the PATH of the processes the test starts: it logs its arguments, then runs the real one."""
    spy, log = tmp_path / "spy", tmp_path / "readlink.log"
    spy.mkdir()
    (spy / "readlink").write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nPATH="{os.environ["PATH"]}" exec readlink "$@"\n')
    (spy / "readlink").chmod(0o755)
    monkeypatch.setenv("PATH", f"{spy}{os.pathsep}{os.environ['PATH']}")
    return log


def test_bounded_run_writes_what_the_batch_function_computes(spark, run_cli, tmp_path, monkeypatch):
    source = "generator://?late=0&seed=7&rate=500&rows_per_batch=5000"
    readlinks = readlink_spy(tmp_path, monkeypatch)
    result = run_cli("run", "fleet", "--source", source, "--max-events", "10000", "--state-dir", "st", "--no-live",
                     "--sink", "windows=parquet:out/windows", "--sink", "alerts=parquet:out/alerts",
                     "--sink", "dead-letters=parquet:out/dead-letters")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "stopped by --max-events 10000" in result.stdout

    state = tmp_path / "st"
    # a checkpoint's writes start no process (Hadoop's FileContext runs `readlink` for every rename)
    calls = readlinks.read_text().splitlines() if readlinks.exists() else []
    assert not [c for c in calls if str(state) in c], calls[:5]
    start_ms = json.loads((state / "speedlayer-run.json").read_text())["run_state"]["generator_start_ms"]
    last = {q["output"]: q for q in json.loads((state / "last-run.json").read_text())["queries"]}
    settings = RunSettings(job="fleet", source=f"{source}&start={start_ms}", max_events=10000)

    windows = spark.read.parquet(str(tmp_path / "out/windows"))
    expected = closed_windows(batch_output(spark, settings, "windows"), last["windows"]["watermark"])
    assert expected.count() > 1000
    assertDataFrameEqual(windows, expected, rtol=1e-9)
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "out/alerts")), batch_output(spark, settings, "alerts"))
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "out/dead-letters")), batch_output(spark, settings, "dead-letters"))


def test_rerun_into_the_same_output_without_its_state_is_refused(run_cli, tmp_path):
    meta = tmp_path / "out/windows/_spark_metadata"
    meta.mkdir(parents=True)
    (meta / "0").write_text("v1\n")
    result = run_cli("run", "fleet", "--max-events", "10", "--sink", "windows=parquet:out/windows")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "already holds the output of another run" in result.stderr
    assert "Traceback" not in result.stderr


def test_matches_run_from_the_cli_writes_what_the_static_join_computes(spark, run_cli, tmp_path):
    source = "generator://?late=0&seed=7&rate=200&vehicles=50&rows_per_batch=1000"
    result = run_cli("run", "fleet", "--source", source, "--max-events", "3000", "--state-dir", "st", "--no-live",
                     "--sink", "matches=parquet:out/matches", "--match-within", "2s", "--match-cell", "100")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "stopped by --max-events 3000" in result.stdout
    assert "(rides from generator (rides, seed=7, rate=200/s, vehicles=50" in result.stderr

    start_ms = json.loads((tmp_path / "st" / "speedlayer-run.json").read_text())["run_state"]["generator_start_ms"]
    settings = RunSettings(job="fleet", source=f"{source}&start={start_ms}", max_events=3000, match_within="2s",
                           match_cell=100)
    expected = batch_output(spark, settings, "matches")
    assert expected.count() > 500
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "out/matches")), expected)


def test_matches_from_a_source_other_than_the_generator_need_rides(run_cli, tmp_path):
    (tmp_path / "landing").mkdir()
    result = run_cli("run", "fleet", "--source", "files:landing", "--sink", "matches=console:")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: output 'matches' joins a second stream, rides: give its source with --rides URI "
        "(e.g. --rides 'generator://?kind=rides' or a redis://, kafka://, files:// URI)"]
