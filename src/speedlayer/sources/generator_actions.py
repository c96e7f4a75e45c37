"""``generator://?kind=actions`` — app actions ``{id, time, action}`` from a mobile app, computed in the JVM.

Event ``n`` is a pure function of (seed, n, start, rate), like the vehicle events: the same
options give the same actions in a stream, after a restart and in batch. Actions follow a fixed
mix (views and clicks most, purchases rare). The generator's ``disorder``, ``late``,
``duplicates`` (re-sent ``id``) and ``malformed`` options apply; malformed payloads are cut short,
miss ``action``, carry an unknown action or a time that is not one, or are not JSON at all.

    generator://?kind=actions&rate=100&seed=7
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import parse_duration
from speedlayer.sources.generator import GeneratorOptions, _fence, _iso, _uniform

#: each action and its share of all actions (the shares add up to 1)
ACTION_MIX = (("view", 0.33), ("click", 0.20), ("open", 0.12), ("search", 0.10), ("add_to_cart", 0.10),
              ("close", 0.06), ("purchase", 0.05), ("share", 0.04))


def pick(draw: Column, mix: tuple[tuple[str, float], ...]) -> Column:
    """The item of ``mix`` a uniform ``draw`` in [0, 1) falls on, by cumulative share."""
    result, bound = None, 0.0
    for item, share in mix[:-1]:
        bound += share
        result = (F.when(draw < bound, F.lit(item)) if result is None else result.when(draw < bound, F.lit(item)))
    return result.otherwise(F.lit(mix[-1][0]))


def timeline(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """``n``, ``src`` (the event a re-send copies) and ``event_ms``, as the vehicle generator spaces them."""
    c, seed = F.col, opts.seed
    is_dup = (_uniform(seed, c("n"), 1) < opts.duplicates) & (c("n") > 0)
    df = seq.select("n", F.when(is_dup, F.greatest(c("n") - 1 - F.floor(_uniform(seed, c("n"), 2) * 3), F.lit(0)))
                    .otherwise(c("n")).cast("long").alias("src"))
    src = c("src")
    lateness = F.when(_uniform(seed, src, 3) < opts.late,
                      F.floor(F.lit(parse_duration(opts.late_delay)) * (0.5 + _uniform(seed, src, 4)))).otherwise(0)
    event_ms = (F.lit(start_ms) + F.floor(src * (1000.0 / opts.rate))
                - F.floor(_uniform(seed, src, 5) * parse_duration(opts.disorder)) - lateness)
    return df.select("n", "src", event_ms.cast("long").alias("event_ms"))


def metadata(opts: GeneratorOptions, start_ms: int, key: Column) -> list[Column]:
    """key, offset (``n``) and ingest_time (event ``n``'s place on the paced timeline)."""
    ingest = F.lit(start_ms) + F.floor(F.col("n") * (1000.0 / opts.rate)) + _fence()
    return [key.alias("key"), F.col("n").cast("string").alias("offset"),
            F.timestamp_millis(ingest.cast("long")).alias("ingest_time")]


def corrupt(good: Column, seed: int, src: Column, replacements: list[Column]) -> Column:
    """One of: the payload cut in half, one of ``replacements`` (edits of ``good``), or not JSON."""
    kind = F.floor(_uniform(seed, src, 8) * (len(replacements) + 2))
    result = F.when(kind == 0, F.substring(good, 1, 12))
    for i, replacement in enumerate(replacements, start=1):
        result = result.when(kind == i, replacement)
    return result.otherwise(F.concat(F.lit("#garbage "), src.cast("string")))


def action_events(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """RAW rows of app actions for a DataFrame of sequence numbers ``n``; key = the action.

    >>> action_events(spark.range(3).withColumnRenamed("id", "n"), GeneratorOptions(kind="actions"), 0)  # doctest: +SKIP
    """
    c, seed = F.col, opts.seed
    df = timeline(seq, opts, start_ms)
    df = df.select("n", "src", F.format_string("a-%07d", c("src")).alias("id"), _iso(c("event_ms")).alias("time"),
                   pick(_uniform(seed, c("src"), 6), ACTION_MIX).alias("action"))
    good = F.to_json(F.struct("id", "time", "action"))
    bad = _uniform(seed, c("src"), 7) < opts.malformed
    value = F.when(bad, corrupt(good, seed, c("src"), [
        F.to_json(F.struct("id", "time")),
        F.to_json(F.struct("id", "time", F.lit("teleport").alias("action"))),
        F.to_json(F.struct("id", F.lit("yesterday").alias("time"), "action")),
    ])).otherwise(good)
    return df.select(value.alias("value"), *metadata(opts, start_ms, c("action")))
