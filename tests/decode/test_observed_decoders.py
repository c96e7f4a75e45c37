"""A job with its own decoder keeps the per-batch observation (events, dead letters, latency): word
count's lines are counted as lines, not as the files Spark read, and a user's decoder is observed
whether or not it counts its own dead letters."""

import dataclasses

from pyspark.sql import functions as F

import speedlayer
from speedlayer import Decoded, observed_decode
from speedlayer.pipelines.wordcount import WORDCOUNT

#: two files: 5 lines of words, 1 of binary data (a dead letter), 1 blank (neither)
FILES = {"a.txt": "to be or not\nto be\n\n\x01\x02 binary\n", "b.txt": "that is\nthe question\nwhether 2\n"}


def run_lines(spark, tmp_path, job):
    landing = tmp_path / "in"
    landing.mkdir()
    for name, text in FILES.items():
        (landing / name).write_text(text)
    with speedlayer.run(job, source=f"files://{landing}?format=text", spark=spark, trigger="available-now",
                        sinks={"totals": f"memory:{job.name}_totals"}, state_dir=str(tmp_path / "st")) as handle:
        summary = handle.wait()
        progress = handle._run.tracker.get(summary.queries[0].name)
    batches = [m for m in progress.metrics if m.events]
    return summary.queries[0].input_rows, batches


def test_wordcount_counts_its_lines_and_dead_letters_and_their_latency(spark, tmp_path):
    input_rows, batches = run_lines(spark, tmp_path, WORDCOUNT)
    assert input_rows == 6  # lines read, not the 2 files
    assert sum(m.events for m in batches) == 5 and sum(m.dead_letters for m in batches) == 1
    assert all("event" in m.latency_ms and "ingest" in m.latency_ms for m in batches)


def shouted(raw, schema):
    """A user's decoder that counts nothing itself: every non-blank line, upper case."""
    lines = raw.where(F.trim("value") != "")
    events = lines.select(F.upper("value").alias("line"), F.col("ingest_time").alias("event_time"), "ingest_time")
    return Decoded(events, lines.where(F.lit(False)).select(F.col("value").alias("payload"), F.lit("").alias("reason"),
                                                              "ingest_time", "key", "offset"))


def counted(raw, schema, observe=None, latency_sample=1.0):
    """A user's decoder that counts both sides, as speedlayer's own do: lines with a digit are refused."""
    lines = raw.where(F.trim("value") != "")
    checked = observed_decode(lines, observe, F.col("ingest_time"), valid=~F.col("value").rlike("[0-9]"),
                              latency_sample=latency_sample)
    events = checked.where(~F.col("value").rlike("[0-9]")).select(
        F.col("value").alias("line"), F.col("ingest_time").alias("event_time"), "ingest_time")
    dead = checked.where(F.col("value").rlike("[0-9]")).select(
        F.col("value").alias("payload"), F.lit("a digit").alias("reason"), "ingest_time", "key", "offset")
    return Decoded(events, dead)


def test_a_users_decoder_that_counts_nothing_gets_its_events_and_latency_observed(spark, tmp_path):
    input_rows, batches = run_lines(spark, tmp_path, dataclasses.replace(WORDCOUNT, name="shout", decoder=shouted))
    assert input_rows == 6 and sum(m.events for m in batches) == 6
    assert all(m.dead_letters is None and "event" in m.latency_ms for m in batches)


def test_a_users_decoder_that_counts_its_dead_letters_is_observed_as_the_builtins_are(spark, tmp_path):
    input_rows, batches = run_lines(spark, tmp_path, dataclasses.replace(WORDCOUNT, name="digits", decoder=counted))
    assert input_rows == 6
    assert sum(m.events for m in batches) == 5 and sum(m.dead_letters for m in batches) == 1
    assert all("event" in m.latency_ms for m in batches)
