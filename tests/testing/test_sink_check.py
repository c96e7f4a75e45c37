"""check_sink_idempotent on the built-in parquet, PostgreSQL, MariaDB and Redis sinks, and on a double-writer."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from speedlayer.core.modes import APPEND, UPDATE
from speedlayer.core.uris import parse_uri
from speedlayer.sinks.base import AT_LEAST_ONCE, EXACTLY_ONCE, Sink, Target
from speedlayer.testing import SinkContentMismatch, SinkNotIdempotent, check_sink_idempotent
from tests.sinks.common import WINDOW_KEY, alerts_frame, window, windows_frame

KEY = ["event_id"]


def alerts_batches(spark, mode: str) -> list[DataFrame]:
    """Two batches of alerts: new keys only (append), or the second one changing half the first's (update)."""
    first = alerts_frame(spark, 6)
    if mode == APPEND:
        return [first, alerts_frame(spark, 6, first=6)]
    return [first, alerts_frame(spark, 6, first=3).withColumn("speed_kmh", F.col("speed_kmh") + 10)]


def test_the_parquet_sink_holds_every_row_once_after_a_replay(spark, tmp_path):
    report = check_sink_idempotent(spark, f"parquet://{tmp_path / 'out'}", alerts_batches(spark, APPEND), KEY)
    assert (report.guarantee, report.mode, report.batches, report.rows, report.duplicates) == (EXACTLY_ONCE, APPEND, 2, 12, 0)


@pytest.mark.parametrize("mode", [APPEND, UPDATE])
def test_the_postgres_sink_is_idempotent(spark, postgres_url, mode):
    report = check_sink_idempotent(spark, f"{postgres_url}?table=kit_{mode}", alerts_batches(spark, mode), KEY, mode=mode)
    assert (report.rows, report.duplicates) == (12 if mode == APPEND else 9, 0)


@pytest.mark.parametrize("mode", [APPEND, UPDATE])
def test_the_mariadb_sink_is_idempotent(spark, mysql_url, mode):
    report = check_sink_idempotent(spark, f"{mysql_url}?table=kit_{mode}", alerts_batches(spark, mode), KEY, mode=mode)
    assert (report.rows, report.duplicates) == (12 if mode == APPEND else 9, 0)


def test_the_redis_sink_appends_events_to_a_stream_once(spark, redis_url):
    url, prefix = redis_url
    report = check_sink_idempotent(spark, f"{url}?prefix={prefix}:alerts", alerts_batches(spark, APPEND), KEY)
    assert (report.mode, report.rows, report.duplicates) == (APPEND, 12, 0)


def test_the_redis_sink_keeps_the_latest_window_of_each_vehicle(spark, redis_url):
    url, prefix = redis_url
    batches = [windows_frame(spark, [window(0, "V1", 3, 40.0), window(0, "V2", 2, 50.0)]),
               windows_frame(spark, [window(10, "V1", 1, 45.0), window(0, "V2", 4, 55.0)])]
    latest = windows_frame(spark, [window(10, "V1", 1, 45.0), window(0, "V2", 4, 55.0)])
    report = check_sink_idempotent(spark, f"{url}?prefix={prefix}:windows", batches, WINDOW_KEY, mode=UPDATE,
                                   expected=latest)
    assert (report.mode, report.rows, report.duplicates) == (UPDATE, 2, 0)


class AppendingSink(Sink):
    """Appends every batch it is given to a parquet folder, whatever its batch id: a replay writes it twice."""

    scheme = "appending"
    modes = (APPEND,)
    writes_batches = True

    def __init__(self, folder: Path, guarantee: str):
        super().__init__(parse_uri(f"appending:{folder}"))
        self.folder, self.guarantee = folder, guarantee

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        return writer.foreachBatch(lambda batch, _: batch.write.mode("append").parquet(str(self.folder))).start()


def test_a_sink_that_writes_a_replayed_batch_twice_is_not_exactly_once(spark, tmp_path):
    batches = alerts_batches(spark, APPEND)
    sink = AppendingSink(tmp_path / "out", EXACTLY_ONCE)
    with pytest.raises(SinkNotIdempotent, match=r"writing batch 1 again .* changed what it holds: 6 row\(s\) more, 0 fewer"):
        check_sink_idempotent(spark, sink, batches, KEY, read_back=lambda: spark.read.parquet(str(sink.folder)))


def test_an_at_least_once_sink_may_write_a_replayed_batch_twice_and_the_report_says_so(spark, tmp_path):
    batches = alerts_batches(spark, APPEND)
    sink = AppendingSink(tmp_path / "out", AT_LEAST_ONCE)
    report = check_sink_idempotent(spark, sink, batches, KEY, read_back=lambda: spark.read.parquet(str(sink.folder)))
    assert (report.guarantee, report.rows, report.duplicates) == (AT_LEAST_ONCE, 12, 6)
    assert "declares at-least-once: writing batch 1 again added 6 duplicate row(s)" in report.notes[0]


def test_a_sink_that_drops_rows_fails_its_content_check(spark, tmp_path):
    batches = alerts_batches(spark, APPEND)
    sink = AppendingSink(tmp_path / "out", EXACTLY_ONCE)
    first_only = lambda: spark.read.parquet(str(sink.folder)).where("event_id < 'e-000006'")  # noqa: E731
    with pytest.raises(SinkContentMismatch, match=r"\(append mode\) holds other rows than the batches written"):
        check_sink_idempotent(spark, sink, batches, KEY, read_back=first_only)
