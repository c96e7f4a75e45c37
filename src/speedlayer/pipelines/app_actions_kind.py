"""``generator://?kind=actions`` — app actions ``{id, time, action}`` from a mobile app, computed in the JVM.

Event ``n`` is a pure function of (seed, n, start, rate), like the vehicle events: the same
options give the same actions in a stream, after a restart and in batch. Actions follow a fixed
mix (views and clicks most, purchases rare). The generator's ``disorder``, ``late``,
``duplicates`` (re-sent ``id``) and ``malformed`` options apply; malformed payloads are cut short,
miss ``action``, carry an unknown action or a time that is not one, or are not JSON at all.

    generator://?kind=actions&rate=100&seed=7
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.sources.generator_kit import GeneratorOptions, corrupt, iso_time, metadata, pick, timeline, uniform

#: each action and its share of all actions (the shares add up to 1)
ACTION_MIX = (("view", 0.33), ("click", 0.20), ("open", 0.12), ("search", 0.10), ("add_to_cart", 0.10),
              ("close", 0.06), ("purchase", 0.05), ("share", 0.04))


def action_events(seq: DataFrame, opts: GeneratorOptions, start_ms: int) -> DataFrame:
    """RAW rows of app actions for a DataFrame of sequence numbers ``n``; key = the action.

    >>> action_events(spark.range(3).withColumnRenamed("id", "n"), GeneratorOptions(kind="actions"), 0)  # doctest: +SKIP
    """
    c, seed = F.col, opts.seed
    df = timeline(seq, opts, start_ms)
    df = df.select("n", "src", F.format_string("a-%07d", c("src")).alias("id"), iso_time(c("event_ms")).alias("time"),
                   pick(uniform(seed, c("src"), 6), ACTION_MIX).alias("action"))
    good = F.to_json(F.struct("id", "time", "action"))
    bad = uniform(seed, c("src"), 7) < opts.malformed
    value = F.when(bad, corrupt(good, seed, c("src"), [
        F.to_json(F.struct("id", "time")),
        F.to_json(F.struct("id", "time", F.lit("teleport").alias("action"))),
        F.to_json(F.struct("id", F.lit("yesterday").alias("time"), "action")),
    ])).otherwise(good)
    return df.select(value.alias("value"), *metadata(opts, start_ms, c("action")))
