"""The word-count job, three ways, as the lectures contrast them (Structured Streaming operators).

- ``batch-counts``: each micro-batch's words alone (DStreams' per-batch ``reduceByKey``): the
  counting runs inside ``foreachBatch`` on the batch's rows, so it keeps no state.
- ``totals``: running totals since the start (stateful). Complete mode re-emits every word each
  trigger (``updateStateByKey``); update mode only the words that changed (``mapWithState``).
- ``windows``: counts per 30 s window sliding every 10 s (``reduceByKeyAndWindow``), on event time:
  a line's leading timestamp, or its arrival time when it has none (see ``decode_text``).

    nc -lk 9999
    speedlayer run wordcount                       # socket://localhost:9999, totals to the console
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import spark_interval
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.decode.text import TEXT_LINE, decode_lines
from speedlayer.pipelines.base import DEAD_LETTERS, Job, Output, Params
from speedlayer.pipelines.ops import flatten_window, with_watermark

#: punctuation at either end of a token (``"Hello,"`` -> ``Hello``; ``don't`` keeps its apostrophe)
_EDGE_PUNCTUATION = r"^[\p{P}\p{S}]+|[\p{P}\p{S}]+$"


class WordcountOptions(BaseModel):
    """How lines become words (``--option lowercase=false``)."""

    lowercase: bool = Field(True, description="fold words to lower case")
    strip_punctuation: bool = Field(True, description="drop punctuation at either end of a word")
    split: str = Field(r"\s+", description="Java regular expression between words")


def words(lines: DataFrame, options: WordcountOptions | None = None) -> DataFrame:
    """One row per word of each line: ``word``, ``event_time``; empty tokens dropped.

    >>> words(spark.createDataFrame([("To be, or", None)], "line string, event_time timestamp"))  # doctest: +SKIP
    [Row(word='to', ...), Row(word='be', ...), Row(word='or', ...)]
    """
    o = options or WordcountOptions()
    word = F.col("token")
    if o.strip_punctuation:
        word = F.regexp_replace(word, _EDGE_PUNCTUATION, "")
    if o.lowercase:
        word = F.lower(word)
    tokens = lines.select(F.explode(F.split("line", o.split)).alias("token"), "event_time")
    return tokens.select(word.alias("word"), "event_time").where(F.col("word") != "")


def batch_counts(batch: DataFrame, batch_id: int) -> DataFrame:
    """Counts of one micro-batch's words (run per batch by ``foreachBatch``)."""
    return batch.groupBy("word").agg(F.count(F.lit(1)).alias("count")).select(
        F.lit(batch_id).cast("long").alias("batch_id"), "word", "count")


def running_totals(word_rows: DataFrame) -> DataFrame:
    """Every word's count since the start."""
    return word_rows.groupBy("word").agg(F.count(F.lit(1)).alias("count"))


def windowed_counts(word_rows: DataFrame, params: Params) -> DataFrame:
    """Counts per word in sliding windows (``--sliding-window`` every ``--slide``) of event time."""
    window = F.window("event_time", spark_interval(params.sliding_window_ms), spark_interval(params.slide_ms))
    return flatten_window(with_watermark(word_rows, params).groupBy(window, "word").agg(F.count(F.lit(1)).alias("count")))


def wordcount_pipeline(lines: DataFrame, params: Params) -> Mapping[str, DataFrame]:
    """The three outputs from decoded lines (``batch-counts`` before its per-batch step: the words)."""
    word_rows = words(lines, params.options)
    return {"batch-counts": word_rows, "totals": running_totals(word_rows), "windows": windowed_counts(word_rows, params)}


WORDCOUNT = Job(
    name="wordcount",
    summary="word count three ways: per batch, running totals, sliding windows",
    schema=TEXT_LINE,
    pipeline=wordcount_pipeline,
    outputs={
        "batch-counts": Output("batch-counts", "each micro-batch's word counts alone (foreachBatch)",
                               (APPEND,), APPEND, False, ("batch_id", "word"), per_batch=batch_counts),
        "totals": Output("totals", "running totals since the start (complete: every word; update: changed words)",
                         (COMPLETE, UPDATE), COMPLETE, True, ("word",)),
        "windows": Output("windows", "counts per --sliding-window (30s) every --slide (10s) of event time",
                          (APPEND, UPDATE, COMPLETE), UPDATE, True, ("window_start", "window_end", "word")),
        "dead-letters": DEAD_LETTERS,
    },
    default_outputs=("totals",),
    default_source="socket://localhost:9999",
    defaults={"sliding_window": "30s", "slide": "10s", "watermark": "10s"},
    options=WordcountOptions,
    decoder=decode_lines,
)
