"""Rows a database refuses become the run's dead letters with the database's reason; every other row is written."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import string
from collections import Counter

import psycopg
import pyarrow.parquet as pq
import pytest

from speedlayer.sinks import open_sink
from speedlayer.sinks.base import Target
from tests.sinks.common import ALERTS_SCHEMA, at
from tests.sinks.test_mysql import query as mysql_query
from tests.sinks.test_mysql import rows as mysql_rows
from tests.sinks.test_postgres import rows as pg_rows

LONG_WORD = "x" * 300  # MariaDB's key column is VARCHAR(255)


def rejected(state_dir, output: str) -> list[dict]:
    """The dead letters a run wrote for ``output``'s refused rows (read with pyarrow, not with the code under test)."""
    folder = state_dir / "rejected" / output if output else state_dir / "rejected"
    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith((".", "_"))) if folder.is_dir() else []
    return [row for p in files for row in pq.read_table(p).to_pylist()]


def test_a_word_too_long_for_mariadb_is_a_dead_letter_and_the_run_goes_on(run_cli, mysql_url, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    texts = ["the quick brown fox\njumps over the lazy dog\n",
             f"the dog sleeps {LONG_WORD} and the fox runs\nover and over\n",
             "a lazy afternoon for the dog\n"]
    for i, text in enumerate(texts):
        (landing / f"part-{i}.txt").write_text(text)
        os.utime(landing / f"part-{i}.txt", (1_700_000_000 + i, 1_700_000_000 + i))  # the source takes files by mtime
    command = ("run", "wordcount", "--source", "files:landing?format=text&max_files_per_trigger=1",
               "--trigger", "available-now", "--state-dir", "st", "--no-live", "--sink", f"totals={mysql_url}")
    first = run_cli(*command)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_cli(*command)  # a restart over the same input
    assert again.returncode == 0, again.stderr[-3000:]

    counts = Counter(word for text in texts for word in text.split())
    del counts[LONG_WORD]
    assert sorted(mysql_rows(mysql_url, "totals", ["word", "count"])) == sorted(counts.items())
    letters = rejected(tmp_path / "st", "totals")
    assert [json.loads(r["payload"]) for r in letters] == [{"word": LONG_WORD, "count": 1}]
    assert letters[0]["reason"].startswith("MariaDB refused: Data too long for column 'word'"), letters[0]["reason"]
    assert letters[0]["key"] == "totals" and letters[0]["offset"] == f"totals/{LONG_WORD}"
    assert "1 row refused by" in first.stderr and "rejected/totals" in first.stderr


def alerts(n: int, **odd: tuple) -> list[tuple]:
    """``n`` alert rows; ``odd`` replaces whole rows by position (``r17=(...)``)."""
    made = [(f"e-{i:04d}", f"V{i % 7}", at(i / 10), 60.0 + i, "Mitte") for i in range(n)]
    for name, row in odd.items():
        made[int(name[1:])] = row
    return made


def write_alerts(spark, url: str, rows: list[tuple], rejected_dir, batch_id: int = 0, mode: str = "append"):
    target = Target("fleet", "alerts", "fleet_alerts", mode=mode, key=("event_id",), rejected=str(rejected_dir))
    write = open_sink(url).batch_function(ALERTS_SCHEMA, target)
    write(spark.createDataFrame(rows, ALERTS_SCHEMA), batch_id)
    return write


def random_text(n: int, seed: int) -> str:
    """Text that does not compress (PostgreSQL compresses a long index key before checking its size)."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def test_postgres_a_key_above_the_index_row_limit_and_a_nul_are_dead_letters(spark, postgres_url, tmp_path):
    long_key = "k-" + random_text(3000, 1)
    rows = alerts(40, r17=(long_key, "V1", at(1.7), 99.0, "Mitte"), r30=("e-0030", "V2", at(3), 70.0, "Mit\x00te"))
    # the limit is real: PostgreSQL text cannot hold \x00
    with pytest.raises(psycopg.DataError, match="NUL"), psycopg.connect(postgres_url) as conn:
        conn.execute("SELECT %s::text", ("Mit\x00te",))
    write = write_alerts(spark, postgres_url, rows, tmp_path / "rejected")
    write_alerts(spark, postgres_url, rows, tmp_path / "rejected")  # Spark replays the batch

    expected = sorted((r[0], r[4]) for i, r in enumerate(rows) if i not in (17, 30))
    assert sorted(pg_rows(postgres_url, "alerts", ["event_id", "zone_name"])) == expected
    assert write.last_rows == 38
    letters = {r["offset"]: r for r in rejected(tmp_path, "")}
    assert set(letters) == {f"alerts/{long_key}", "alerts/e-0030"}
    assert letters[f"alerts/{long_key}"]["reason"].startswith("PostgreSQL refused: index row size")
    assert json.loads(letters[f"alerts/{long_key}"]["payload"])["event_id"] == long_key
    assert letters["alerts/e-0030"]["reason"] == ("column 'zone_name' holds a NUL (\\x00) character, "
                                                   "which PostgreSQL text cannot store")
    assert json.loads(letters["alerts/e-0030"]["payload"])["zone_name"] == "Mit\x00te"  # kept as it came


def test_mysql_a_timestamp_outside_a_timestamp_column_and_a_nan_are_dead_letters(spark, mysql_url, tmp_path):
    # The sink creates DATETIME(6) (years 1000-9999); a table of the user's may use TIMESTAMP (1970-2038).
    mysql_query(mysql_url, "CREATE TABLE alerts (event_id VARCHAR(64) PRIMARY KEY, vehicle_id TEXT, "
                           "event_time TIMESTAMP(6) NULL, speed_kmh DOUBLE, zone_name TEXT)")
    late = dt.datetime(2040, 1, 1, tzinfo=dt.timezone.utc)
    rows = alerts(30, r5=("e-0005", "V5", late, 65.0, "Mitte"), r9=("e-0009", "V2", at(0.9), float("nan"), "Mitte"))
    write_alerts(spark, mysql_url, rows, tmp_path / "rejected")
    write_alerts(spark, mysql_url, rows, tmp_path / "rejected", batch_id=1)  # refused again in a later batch

    expected = sorted(r[0] for i, r in enumerate(rows) if i not in (5, 9))
    assert sorted(r[0] for r in mysql_rows(mysql_url, "alerts", ["event_id"])) == expected
    letters = {r["offset"]: r["reason"] for r in rejected(tmp_path, "")}
    assert len(rejected(tmp_path, "")) == 2  # the second batch's identical refusals are not stored again
    assert letters["alerts/e-0005"].startswith("MariaDB refused: Incorrect datetime value: '2040-01-01 00:00:00"), letters
    assert letters["alerts/e-0009"] == "column 'speed_kmh' is NaN or infinite, which MySQL cannot store"


def test_mysql_a_row_above_max_allowed_packet_is_a_dead_letter(spark, mysql_url, tmp_path):
    packet = mysql_query(mysql_url, "SELECT @@max_allowed_packet")[0][0]
    huge = "z" * (packet + 1000)
    rows = alerts(20, r3=("e-0003", "V3", at(0.3), 61.0, huge))
    write_alerts(spark, f"{mysql_url}?retry_for=2s", rows, tmp_path / "rejected")

    assert sorted(r[0] for r in mysql_rows(mysql_url, "alerts", ["event_id"])) == [r[0] for r in rows if r[0] != "e-0003"]
    [letter] = rejected(tmp_path, "")
    assert letter["reason"].startswith("MariaDB refused: row is ") and f"max_allowed_packet ({packet} bytes)" in letter["reason"]
    assert json.loads(letter["payload"])["zone_name"] == huge
