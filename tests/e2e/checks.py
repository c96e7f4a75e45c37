"""What the crash and cluster tests check a run's sinks against: ``tests.oracle`` over the raw input entries."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests import oracle, servers
from tests.e2e.killing import mysql_rows, postgres_rows


def naive_utc(value: datetime | str) -> datetime:
    """A time as naive UTC, from an aware datetime (PostgreSQL) or ISO-8601 text (Redis, run summaries)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value


def raw_entries(stream_uri: str) -> list[tuple[str, str, datetime]]:
    """(offset, payload, ingest time) of every entry of the source's stream shards, read with redis-py."""
    import redis

    prefix, shards = stream_uri.split("stream=")[1].split("&shards=")
    client = redis.Redis(host=servers.REDIS.host, port=servers.REDIS.port, db=0, decode_responses=True)
    entries = []
    for shard in range(int(shards)):
        key = f"{prefix}:{shard}"
        for entry_id, fields in client.xrange(key):
            ingest = naive_utc(datetime.fromtimestamp(int(entry_id.split("-")[0]) / 1000, timezone.utc))
            entries.append((f"{key}/{entry_id}", fields.get("value"), ingest))
    client.close()
    return entries


def stream_pings(stream_uri: str) -> list:
    """The oracle's pings of a Redis stream: every entry parsed, re-sent copies dropped."""
    parsed = (oracle.parse(payload, ingest) for _, payload, ingest in raw_entries(stream_uri))
    return oracle.first_copies([p for p in parsed if p is not None])


def final_watermark(state_dir: Path, output: str) -> datetime:
    """The watermark an output's query ended at, from the run's summary in ``state_dir``."""
    queries = json.loads((state_dir / "last-run.json").read_text())["queries"]
    return naive_utc(next(q["watermark"] for q in queries if q["output"] == output))


def check_windows(postgres_url: str, pings, closed_by: datetime, at_least: int = 500) -> None:
    columns = ["window_start", "window_end", "vehicle_id", "events", "avg_speed_kmh", "max_speed_kmh", "over_limit_events"]
    rows = postgres_rows(postgres_url, "windows", columns)
    expected = oracle.windows(pings, timedelta(seconds=10), closed_by)
    got = {(naive_utc(r[0]), naive_utc(r[1]), r[2]): r[3:] for r in rows}
    assert len(rows) == len(got), "a window written twice"
    assert set(got) == set(expected) and len(expected) > at_least, (len(got), len(expected))
    for key, want in expected.items():
        events, avg, top, over = got[key]
        assert (events, top, over) == (want["events"], want["max_speed_kmh"], want["over_limit_events"]), key
        assert avg == pytest.approx(want["avg_speed_kmh"], rel=1e-9), key


def check_alerts(mysql_url: str, pings) -> None:
    rows = mysql_rows(mysql_url, "alerts", ["event_id", "excess_kmh"])
    expected = oracle.alerts(pings)
    assert len(rows) == len({r[0] for r in rows}) and len(expected) > 100
    assert {r[0]: pytest.approx(r[1], abs=1e-9) for r in rows} == expected


def check_dead_letters(key: str, refused: list[tuple[str, str]]) -> None:
    import redis

    client = redis.Redis(host=servers.REDIS.host, port=servers.REDIS.port, db=0, decode_responses=True)
    got = [(fields["offset"], fields["payload"]) for _, fields in client.xrange(key)]
    client.close()
    assert len(refused) > 10 and len(got) == len(set(got))
    assert sorted(got) == sorted(refused)


def check_sliding(prefix: str, pings, closed_by: datetime) -> None:
    import redis

    client = redis.Redis(host=servers.REDIS.host, port=servers.REDIS.port, db=0, decode_responses=True)
    got = {key.split(":")[-1]: client.hgetall(key) for key in client.scan_iter(f"{prefix}:*")}
    client.close()
    expected = oracle.latest_sliding(pings, timedelta(minutes=1), timedelta(seconds=10), closed_by)
    assert set(got) == set(expected) and len(expected) == 100
    for vehicle, want in expected.items():
        row = got[vehicle]
        end = naive_utc(row["window_end"])
        assert (end, int(row["events"])) == (want["window_end"], want["events"]), vehicle
        assert float(row["avg_speed_kmh"]) == pytest.approx(want["avg_speed_kmh"], rel=1e-9), vehicle


def check_congestion(spark, path: Path, pings, closed_by: datetime, fmt: str = "parquet") -> None:
    """The congestion rows a table holds (parquet: through _spark_metadata, delta: through its log: committed
    files only) against the oracle, each window and zone once."""
    table = [r.asDict() for r in spark.read.format(fmt).load(str(path)).collect()]
    got = {(r["window_start"], r["zone_id"]): r for r in table}
    expected = oracle.congestion(pings, closed_by)
    assert len(table) == len(got) == len(expected) > 0
    for key, want in expected.items():
        assert got[key]["events"] == want["events"], key
        assert got[key]["avg_speed_kmh"] == pytest.approx(want["avg_speed_kmh"], rel=1e-9), key
