"""redis:// — entries trimmed away before the query read them fail the query, naming the lost range.

Like Kafka's ``failOnDataLoss``: ``fail_on_data_loss=false`` skips the range with a warning. The
oracles are the entry ids written here; every query ends by itself (availableNow).
"""

from __future__ import annotations

import redis

from speedlayer.sources import open_source
from tests.sources.test_redis_streams import T0_MS, fill


def entry(n: int) -> str:
    return f"{T0_MS + n}-0"


def run(spark, uri: str, checkpoint) -> tuple[dict[int, list[str]], BaseException | None]:
    """Read to the current end (availableNow): each batch's values, and the query's error if it failed."""
    batches: dict[int, list[str]] = {}

    def collect(df, batch_id):
        batches[batch_id] = sorted(r.value for r in df.collect())

    query = (open_source(uri).read_stream(spark).writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(300)
    except Exception:  # noqa: BLE001 — the test looks at query.exception()
        pass
    return batches, query.exception()


def lost_message(error: BaseException | None) -> str:
    assert error is not None, "the query should have failed"
    text = str(error)
    at = text.index("SourceError: ")
    return text[at + len("SourceError: "):].splitlines()[0]


def read_then_trim(spark, url: str, stream: str, checkpoint) -> list[str]:
    """100 entries read (3 batches), 100 more written, then trimmed to the newest 50: 100..149 never read."""
    written = fill(url, stream, 0, 100)
    batches, error = run(spark, f"{url}?stream={stream}&max_records_per_trigger=40", checkpoint)
    assert error is None
    assert [len(batches[b]) for b in sorted(batches)] == [40, 40, 20]
    assert sorted(v for b in batches.values() for v in b) == sorted(written)  # the first run read 0..99
    written += fill(url, stream, 100, 100)
    client = redis.Redis.from_url(url)
    assert client.xtrim(stream, maxlen=50, approximate=False) == 150
    assert client.xrange(stream, count=1)[0][0].decode() == entry(150)
    client.close()
    return written


def expected_loss(stream: str, after: int, before: int) -> str:
    return (f"Redis stream {stream}: the entries after {entry(after)} and before {entry(before)} "
            f"({before - after - 1} entries) were deleted (XTRIM, MAXLEN, XDEL) before this query read them: "
            "to skip them and go on, add fail_on_data_loss=false to the source URI")


def test_a_stream_trimmed_past_the_last_read_entry_fails_the_query_naming_the_range(spark, redis_url, tmp_path):
    url, stream = redis_url
    read_then_trim(spark, url, stream, tmp_path / "ck")
    batches, error = run(spark, f"{url}?stream={stream}&max_records_per_trigger=40", tmp_path / "ck")
    assert batches == {}
    assert lost_message(error) == expected_loss(stream, 99, 150)


def test_with_fail_on_data_loss_false_the_rest_is_read_and_the_range_recorded(spark, redis_url, tmp_path):
    url, stream = redis_url
    written = read_then_trim(spark, url, stream, tmp_path / "ck")
    uri = f"{url}?stream={stream}&max_records_per_trigger=40&fail_on_data_loss=false"
    batches, error = run(spark, uri, tmp_path / "ck")
    assert error is None
    assert sorted(v for b in batches.values() for v in b) == sorted(written[150:])
    # the skipped range is kept in the checkpoint's offsets log, with the batch that skipped it
    skipped = [json_line(p) for p in sorted((tmp_path / "ck" / "offsets").iterdir()) if p.name.isdigit()]
    gap = {"after": entry(99), "before": entry(150), "entries": 50}
    assert [s[stream].get("skipped") for s in skipped] == [None, None, None, gap, None]


def json_line(path) -> dict:
    import json

    return json.loads(path.read_text().splitlines()[-1])


def replay_after_trim(spark, url: str, stream: str, checkpoint, uri: str) -> list[str]:
    """600 entries read in 3 batches of 200; batch 2's commit is lost, then entries 0..499 are trimmed."""
    written = fill(url, stream, 0, 600)
    batches, error = run(spark, uri, checkpoint)
    assert error is None and batches[2] == sorted(written[400:])
    for lost in ("2", ".2.crc"):
        (checkpoint / "commits" / lost).unlink(missing_ok=True)
    client = redis.Redis.from_url(url)
    assert client.xtrim(stream, minid=entry(500), approximate=False) == 500
    client.close()
    return written


def test_a_replayed_batch_whose_range_was_trimmed_fails_instead_of_reading_less(spark, redis_url, tmp_path):
    url, stream = redis_url
    uri = f"{url}?stream={stream}&max_records_per_trigger=200"
    replay_after_trim(spark, url, stream, tmp_path / "ck", uri)
    batches, error = run(spark, uri, tmp_path / "ck")
    assert 2 not in batches
    assert lost_message(error) == expected_loss(stream, 399, 500)


def test_a_replayed_batch_whose_range_was_trimmed_reads_the_rest_with_fail_on_data_loss_false(spark, redis_url, tmp_path):
    url, stream = redis_url
    uri = f"{url}?stream={stream}&max_records_per_trigger=200&fail_on_data_loss=false"
    written = replay_after_trim(spark, url, stream, tmp_path / "ck", uri)
    batches, error = run(spark, uri, tmp_path / "ck")
    assert error is None
    assert batches == {2: sorted(written[500:])}


def test_trimming_only_entries_already_read_is_no_loss(spark, redis_url, tmp_path):
    """The usual MAXLEN: the entries read so far (the last one too) go, the unread ones stay."""
    url, stream = redis_url
    uri = f"{url}?stream={stream}&max_records_per_trigger=40"
    written = fill(url, stream, 0, 100)
    assert run(spark, uri, tmp_path / "ck")[1] is None
    written += fill(url, stream, 100, 100)
    client = redis.Redis.from_url(url)
    assert client.xtrim(stream, maxlen=100, approximate=False) == 100  # exactly 0..99, the entries read
    client.close()
    batches, error = run(spark, uri, tmp_path / "ck")
    assert error is None
    assert sorted(v for b in batches.values() for v in b) == sorted(written[100:])
