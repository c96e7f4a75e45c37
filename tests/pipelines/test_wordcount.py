"""wordcount on static DataFrames: text decoding, tokenising, per-batch counts, totals, sliding windows."""

from datetime import datetime, timedelta

from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.decode.text import KEPT_CHARS, MAX_LINE_BYTES, decode_lines
from speedlayer.pipelines.base import Params
from speedlayer.pipelines.wordcount import WordcountOptions, batch_counts, wordcount_pipeline, words

ARRIVAL = datetime(2026, 11, 22, 10, 0, 0)


def raw(spark, *lines):
    return spark.createDataFrame([(line, None, str(i), ARRIVAL) for i, line in enumerate(lines)], RAW_SCHEMA)


def test_lines_decode_as_text_with_optional_leading_time(spark):
    decoded = decode_lines(raw(spark, "to be or not", "", "   ", "2026-11-22T09:59:41Z the quick fox",
                               "2026-11-22 09:59:42.5 lazy dog", '{"json": "is text too"}'))
    assert sorted((r.line, r.event_time) for r in decoded.events.collect()) == [
        ("lazy dog", datetime(2026, 11, 22, 9, 59, 42, 500000)),
        ("the quick fox", datetime(2026, 11, 22, 9, 59, 41)),
        ("to be or not", ARRIVAL),
        ('{"json": "is text too"}', ARRIVAL),
    ]
    assert decoded.dead_letters.count() == 0  # blank lines are ignored, not refused


def test_binary_garbage_long_lines_and_bad_times_are_dead_letters(spark):
    long_line = "a " * (MAX_LINE_BYTES // 2 + 1)
    decoded = decode_lines(raw(spark, "fine words", "\x00\x01\x02\x7f", "caf\ufffd bytes", long_line,
                               "2026-13-40T10:00:00Z month thirteen", "2026-11-22T12:00:00Z from the future"))
    reasons = {r.offset: (r.reason, len(r.payload)) for r in decoded.dead_letters.collect()}
    assert reasons["1"][0] == reasons["2"][0] == "binary data, not a line of UTF-8 text"
    assert reasons["3"][0].startswith("line longer than 1 MiB (1048578 bytes)") and reasons["3"][1] == KEPT_CHARS
    assert reasons["4"][0].startswith("leading timestamp is not a valid time")
    assert reasons["5"][0] == "leading timestamp is more than 1s ahead of ingest time"
    assert [r.line for r in decoded.events.collect()] == ["fine words"]


def test_a_time_no_state_could_hold_is_a_dead_letter_stamped_or_not(spark):
    rows = [("0001-01-01T00:00:00Z year one", ARRIVAL), ("no stamp, clock reset", datetime(1970, 1, 1)),
            ("no stamp, no arrival", None), ("fine", ARRIVAL)]
    decoded = decode_lines(spark.createDataFrame([(t, None, str(i), at) for i, (t, at) in enumerate(rows)], RAW_SCHEMA))
    assert sorted((r.offset, r.reason) for r in decoded.dead_letters.collect()) == [
        ("0", "leading timestamp is before 2000-01-01T00:00:00Z: a reset clock"),
        ("1", "ingest time (the line has no leading timestamp) is before 2000-01-01T00:00:00Z: a reset clock"),
        ("2", "no leading timestamp and no ingest time: the line has no time")]
    assert [(r.line, r.event_time) for r in decoded.events.collect()] == [("fine", ARRIVAL)]


def lines(spark, rows):
    return spark.createDataFrame([(text, ARRIVAL + timedelta(seconds=s)) for text, s in rows],
                                 "line string, event_time timestamp")


def test_tokenising_is_configurable(spark):
    df = lines(spark, [("To be, or NOT to-be... don't!  ", 0)])
    assert [r.word for r in words(df).collect()] == ["to", "be", "or", "not", "to-be", "don't"]
    raw_words = words(df, WordcountOptions(lowercase=False, strip_punctuation=False))
    assert [r.word for r in raw_words.collect()] == ["To", "be,", "or", "NOT", "to-be...", "don't!"]
    assert [r.word for r in words(df, WordcountOptions(split="[\\s,.!-]+")).collect()] == \
        ["to", "be", "or", "not", "to", "be", "don't"]


def test_totals_windows_and_per_batch_counts(spark):
    df = lines(spark, [("a b a", 1), ("b", 12), ("a", 25)])
    out = wordcount_pipeline(df, Params(sliding_window_ms=30_000, slide_ms=10_000, options=WordcountOptions()))
    assert sorted(map(tuple, out["totals"].collect())) == [("a", 3), ("b", 2)]
    windows = {(r.window_start.second if r.window_start.minute == 0 else r.window_start.second - 60, r.word): r["count"]
               for r in out["windows"].collect()}
    # 30 s windows every 10 s: [-20,10) [-10,20) [0,30) [10,40) [20,50)
    assert windows == {(-20, "a"): 2, (-20, "b"): 1, (-10, "a"): 2, (-10, "b"): 2, (0, "a"): 3, (0, "b"): 2,
                       (10, "b"): 1, (10, "a"): 1, (20, "a"): 1}
    assert sorted(map(tuple, batch_counts(out["batch-counts"], 7).collect())) == [(7, "a", 3), (7, "b", 2)]
