"""check_source_replay on the built-in files, generator and Redis Streams sources, and on broken ones."""

from __future__ import annotations

import json

import pytest
import redis
from pyspark.sql import functions as F

from speedlayer.core.uris import parse_uri
from speedlayer.sources.files import FilesSource
from speedlayer.testing import NothingCompared, OffsetProblem, ReplayMismatch, check_source_replay
from tests.helpers import land_files
from tests.testing.events import INGEST, ping


def landing_of(tmp_path, files: int = 2, per_file: int = 3):
    """``files`` JSON-lines files of ``per_file`` pings each, the same ping twice in each (equal rows, own offsets)."""
    lines = [[json.dumps(ping(f"e{f}-{min(i, 1)}", f * 10 + min(i, 1))) for i in range(per_file)] for f in range(files)]
    land_files(tmp_path / "landing", lines, INGEST)
    return tmp_path / "landing"


def test_the_files_source_replays_a_batch_exactly(spark, tmp_path):
    report = check_source_replay(spark, f"files://{landing_of(tmp_path)}?max_files_per_trigger=1")
    assert (report.batches, report.rows, report.replayed_batch, report.replayed_rows) == (2, 6, 1, 3)


def test_the_generator_replays_a_batch_exactly(spark):
    uri = "generator://?seed=3&start=2026-11-22T10:00:00Z&rows_per_batch=200&duplicates=0.2&malformed=0.1"
    report = check_source_replay(spark, uri, max_events=1000)
    assert (report.replayed_batch, report.replayed_rows) == (1, 200)


def test_redis_streams_replay_a_batch_exactly(spark, redis_url):
    url, prefix = redis_url
    client = redis.Redis.from_url(url)
    for i in range(8):
        client.xadd(f"{prefix}:{i % 2}", {"value": json.dumps(ping(f"r{i}", i))})
    client.close()
    report = check_source_replay(spark, f"{url}?stream={prefix}&shards=2&max_records_per_trigger=4")
    assert (report.batches, report.rows, report.replayed_batch, report.replayed_rows) == (2, 8, 1, 4)


class DrawingFiles(FilesSource):
    """A landing directory whose payloads get a random suffix each time they are read: not replay-stable."""

    def read_stream(self, spark, max_events=None):
        return super().read_stream(spark, max_events).withColumn("value", F.concat("value", F.expr("uuid()")))


class OneOffsetFiles(FilesSource):
    """A landing directory whose rows all carry the file's path as their offset: not one offset per row."""

    def read_stream(self, spark, max_events=None):
        return super().read_stream(spark, max_events).withColumn("offset", F.regexp_replace("offset", ":[0-9]+$", ""))


def test_a_source_that_reads_other_rows_on_replay_fails(spark, tmp_path):
    source = DrawingFiles(parse_uri(f"files://{landing_of(tmp_path)}?max_files_per_trigger=1"))
    with pytest.raises(ReplayMismatch, match=r"batch 1 read again from the checkpoint .* 3 row\(s\) only in the first read"):
        check_source_replay(spark, source)


def test_a_source_that_gives_rows_the_same_offset_fails(spark, tmp_path):
    source = OneOffsetFiles(parse_uri(f"files://{landing_of(tmp_path)}?max_files_per_trigger=1"))
    with pytest.raises(OffsetProblem, match=r"gave 2 offset\(s\) to more than one row .* x3"):
        check_source_replay(spark, source)


def test_a_source_too_short_for_the_replay_says_what_to_give(spark, tmp_path):
    with pytest.raises(NothingCompared, match="ran dry after 1 micro-batch"):
        check_source_replay(spark, f"files://{landing_of(tmp_path, files=1)}?max_files_per_trigger=1")
