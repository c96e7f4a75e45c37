"""Long runs, bounded: RocksDB's memory and the checkpoints' retention set by default and by flags, the
checkpoints' size shown at the end and by ``speedlayer status``, a warning once a bound is passed."""

import json
import os
import re
from pathlib import Path

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.core.sizes import human_size
from speedlayer.runtime.bounds import BOUNDED_MEMORY, MAX_MEMORY_MB, MIN_BATCHES_TO_RETAIN, BoundsWatch
from speedlayer.runtime.session import DEFAULT_CONF
from speedlayer.runtime.settings import build_settings
from tests.runtime.shop import order_lines


def files_under(path: Path) -> int:
    """What ``du --apparent-size -b`` counts for files: every file's length, independently of speedlayer."""
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def test_every_session_bounds_rocksdb_memory_keeps_20_batches_and_reuses_python_workers(spark):
    assert spark.conf.get(BOUNDED_MEMORY) == "true"
    assert spark.conf.get(MAX_MEMORY_MB) == "500"
    assert spark.conf.get(MIN_BATCHES_TO_RETAIN) == "20"
    assert spark.sparkContext.getConf().get("spark.python.worker.reuse") == "true"


def test_the_flags_set_the_bounds_and_the_users_conf_wins():
    flags = {"job": "fleet", "max_state_memory": "1g", "retain_batches": 5}
    conf = build_settings({}, flags).spark_conf()
    assert (conf[BOUNDED_MEMORY], conf[MAX_MEMORY_MB], conf[MIN_BATCHES_TO_RETAIN]) == ("true", "1024", "5")
    given = build_settings({}, {**flags, "conf": {MAX_MEMORY_MB: "64", MIN_BATCHES_TO_RETAIN: "7"}}).spark_conf()
    assert (given[MAX_MEMORY_MB], given[MIN_BATCHES_TO_RETAIN]) == ("64", "7")
    from_file = build_settings({"max_state_memory": "256m", "retain_batches": 9, "max_checkpoint_size": "2g"},
                               {"job": "fleet"})
    assert from_file.spark_conf()[MAX_MEMORY_MB] == "256" and from_file.max_checkpoint_size == "2g"


def test_a_run_that_goes_on_commits_the_drivers_heap_up_front_and_a_bounded_one_does_not():
    options = "spark.driver.extraJavaOptions"
    assert build_settings({}, {"job": "fleet"}).spark_conf()[options] == "-Xms2048m -XX:+AlwaysPreTouch"
    assert build_settings({}, {"job": "fleet", "duration": 60}).spark_conf()[options] == "-Xms2048m -XX:+AlwaysPreTouch"
    mine = {"spark.driver.memory": "3g", options: "-Dmine=1 -XX:-AlwaysPreTouch"}  # the user's come last: theirs win
    assert (build_settings({}, {"job": "fleet", "conf": mine}).spark_conf()[options]
            == "-Xms3072m -XX:+AlwaysPreTouch -Dmine=1 -XX:-AlwaysPreTouch")
    for bounded in ({"max_events": 1000}, {"trigger": "available-now"}, {"trigger": "once"}):
        assert options not in build_settings({}, {"job": "fleet", **bounded}).spark_conf(), bounded
    with pytest.raises(ConfigError, match="invalid spark.driver.memory 'big'"):
        build_settings({}, {"job": "fleet", "conf": {"spark.driver.memory": "big"}}).spark_conf()


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--max-state-memory", "lots", "invalid --max-state-memory 'lots': give a size above zero with its unit, e.g. 512m"),
    ("--max-state-memory", "512", "invalid --max-state-memory '512': give a size above zero with its unit"),
    ("--max-state-memory", "100k", "--max-state-memory 100k is under 1m: give at least 1m"),
    ("--max-checkpoint-size", "0g", "invalid --max-checkpoint-size '0g': give a size above zero"),
    ("--retain-batches", "0", "--retain-batches 0: give 1 or more (a restart needs the last committed batch)"),
])
def test_a_bad_bound_is_one_line_naming_the_flag_before_spark_starts(capfd, flag, value, says):
    from speedlayer.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(["run", "fleet", flag, value, "--no-live"])
    err = capfd.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.strip().splitlines() == [err.strip()] and err.startswith(f"error: {says}"), err
    with pytest.raises(ConfigError):
        build_settings({flag[2:].replace("-", "_"): value}, {"job": "fleet"})


def test_the_warning_comes_once_per_crossing_and_the_disk_is_walked_at_most_every_interval(tmp_path):
    class Batch:
        def __init__(self, query, memory):
            self.query, self.state = query, [type("Op", (), {"memory_bytes": memory})()]

    checkpoint = tmp_path / "cp"
    checkpoint.mkdir()
    now, told = [0.0], []
    watch = BoundsWatch([checkpoint], 100, 1000, told.append, every_s=10, clock=lambda: now[0])
    (checkpoint / "a").write_bytes(b"x" * 150)
    watch.batch_committed(Batch("q1", 600))
    watch.batch_committed(Batch("q2", 600))  # 1,200 bytes of state together: over 1,000
    assert sorted(line.split(":")[0] for line in told) == [
        "the run's checkpoints hold 150 B on disk, over --max-checkpoint-size 100 B",
        "the state's memory is 1.2 KiB (stateOperators' memoryUsedBytes), over --max-state-memory 1000 B"]
    (checkpoint / "a").unlink()
    now[0] = 5
    watch.batch_committed(Batch("q2", 100))  # memory back under; the disk is not walked again within 10 s
    assert len(told) == 2
    now[0] = 11
    watch.batch_committed(Batch("q2", 100))  # the disk back under: nothing to say, the warning re-armed
    (checkpoint / "b").write_bytes(b"x" * 101)
    now[0] = 22
    watch.batch_committed(Batch("q2", 950))  # both crossed again
    assert len(told) == 4 and {line.split(",")[0] for line in told[2:]} == {
        "the run's checkpoints hold 101 B on disk", "the state's memory is 1.5 KiB (stateOperators' memoryUsedBytes)"}


def test_a_run_keeps_what_retain_batches_says_shows_its_checkpoint_size_and_warns_once(spark, capfd, tmp_path):
    from speedlayer.cli.app import main

    landing, state = tmp_path / "landing", tmp_path / "state"
    landing.mkdir()
    lines = order_lines(48)
    for i in range(8):  # one file a batch: 8 batches
        (landing / f"orders-{i}.jsonl").write_text("\n".join(lines[i * 6:(i + 1) * 6]) + "\n")
    try:
        main(["run", "tests.runtime.shop:SHOP", "--source", f"files:{landing}?format=json&max_files_per_trigger=1",
              "--trigger", "available-now", "--state-dir", str(state), "--no-live", "--master", "local[2]",
              "--sink", "orders=parquet:" + str(tmp_path / "out"), "--retain-batches", "3", "--max-checkpoint-size", "1k",
              "--max-state-memory", "1g", "--conf", f"{MAX_MEMORY_MB}=64"])
        # the run's session is this test session: it has the run's settings, the user's --conf winning
        assert (spark.conf.get(BOUNDED_MEMORY), spark.conf.get(MAX_MEMORY_MB), spark.conf.get(MIN_BATCHES_TO_RETAIN)) == \
            ("true", "64", "3")
    finally:  # the next tests of this process see speedlayer's defaults again
        for key in (MAX_MEMORY_MB, MIN_BATCHES_TO_RETAIN):
            spark.conf.set(key, DEFAULT_CONF[key])
    out, err = capfd.readouterr()
    checkpoint = state / "checkpoints" / "orders"
    last = json.loads((state / "last-run.json").read_text())
    assert last["queries"][0]["batches"] == 8, err

    for log in ("offsets", "commits"):
        # Spark purges below (the batch it plans - N): N + 1 remain; its purge runs asynchronously, and the
        # last one may still be under way when the query stops
        kept = sorted(int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit())
        assert kept in ([4, 5, 6, 7], [3, 4, 5, 6, 7]), (log, kept)

    warnings = [line for line in err.splitlines() if "--max-checkpoint-size" in line]
    assert len(warnings) == 1, err
    assert re.fullmatch(r"note: the run's checkpoints hold [\d.]+ KiB on disk, over --max-checkpoint-size 1.0 KiB: "
                        r"lower --retain-batches, .*", warnings[0]), warnings

    on_disk = files_under(checkpoint)
    assert last["checkpoint_bytes"] == last["queries"][0]["checkpoint_bytes"] == on_disk
    assert f"checkpoints on disk: {human_size(on_disk)}" in out, out

    main(["status", "--state-dir", str(state), "--no-operators"])
    shown = capfd.readouterr().out
    assert f", checkpoint {human_size(on_disk)} on disk" in shown, shown
    assert f"checkpoints on disk: {human_size(on_disk)} in total" in shown, shown
