"""The bench feed's events are valid wire format, and the watcher reads the memory sink's rows."""

from pyspark.sql import functions as F

from speedlayer.bench.feed import Template, event_line, iso_ms
from speedlayer.bench.watch import _parse_rows, due_column
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT


def test_feed_lines_decode_without_dead_letters_and_carry_their_creation_time(spark):
    stamp_ms = 1_795_000_000_123
    lines = [event_line(n, Template(f"V{n:04d}", 50.0 + n, 52.5, 13.4), iso_ms(stamp_ms)).rstrip("\n") for n in range(3)]
    raw = spark.createDataFrame([(line, None, str(i), None) for i, line in enumerate(lines)],
                                "value string, key string, offset string, ingest_time timestamp")
    raw = raw.withColumn("ingest_time", F.timestamp_millis(F.lit(stamp_ms)))
    decoded = decode(raw, VEHICLE_EVENT)
    assert decoded.dead_letters.count() == 0
    due = decoded.events.select(due_column("alerts", 5000).alias("due")).collect()
    assert [r.due for r in due] == [stamp_ms] * 3


def test_watcher_parses_one_column_rows():
    assert _parse_rows("[12]\n[13]\n[null]\n") == [12, 13]


def test_committed_files_reads_plain_and_compacted_log_entries(tmp_path):
    import json

    from speedlayer.bench.watch import committed_files

    log = tmp_path / "_spark_metadata"
    log.mkdir()
    entry = lambda *paths: "v1\n" + "\n".join(json.dumps({"path": p, "size": 1}) for p in paths) + "\n"  # noqa: E731
    (log / "0").write_text(entry("file:///out/a.parquet"))
    (log / "9.compact").write_text(entry("file:///out/a.parquet", "file:///out/b.parquet"))
    (log / ".10.tmp").write_text("half written")
    assert committed_files(tmp_path) == {"file:///out/a.parquet", "file:///out/b.parquet"}
    assert committed_files(tmp_path / "missing") == set()
