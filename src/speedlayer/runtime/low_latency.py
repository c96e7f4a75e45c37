"""What a query in continuous or real-time mode needs when it starts: a core for each task it keeps
running, and settings without predicate push-down (Spark gives each query a copy of the session's
settings when it starts, so a setting changed around ``start()`` holds for that query alone).

>>> share_cores(spark, plan)                                          # doctest: +SKIP
>>> with session_conf(spark, stateless_conf(spark)):                  # doctest: +SKIP
...     query = writer.start()
"""

from __future__ import annotations

from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import RunPlan

EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
#: Spark's rule that moves a filter below the projections under it, writing each column it reads as the
#: expression that computed it
PUSH_DOWN_PREDICATES = "org.apache.spark.sql.catalyst.optimizer.PushDownPredicates"


def share_cores(spark: Any, plan: RunPlan) -> None:
    """Refuse a run whose queries cannot all keep their tasks running, and give each source its share.

    Continuous and real-time mode keep one task per source partition running (for good, or for the
    whole batch): the queries must fit the cores, or the tasks without one wait for ever.
    """
    cores, queries = spark.sparkContext.defaultParallelism, len(plan.queries)
    if cores < queries:
        raise ConfigError(f"{plan.trigger.mode} keeps a task running per query and source partition: {queries} queries "
                          f"need at least {queries} cores, this session has {cores}: "
                          f"use --master local[{queries}] or select fewer outputs")
    plan.source.limit_partitions(cores // queries)


def stateless_conf(spark: Any) -> dict[str, str]:
    """The settings of a query in continuous or real-time mode: no predicate push-down, beside the rules
    the session already leaves out.

    Without a watermark and a deduplication between them, an output's filter (the alerts' speed over
    the zone's limit) would be pushed into the decode's projections: every decoded field it reads,
    and the zone lookup's dozens of reads of latitude and longitude, written out as the field's whole
    validating expression, evaluated row by row in a filter too large to compile. Such a query reads
    Kafka and writes Kafka or the console, so the push-down has no scan to gain anything in.
    """
    rules = [r.strip() for r in (spark.conf.get(EXCLUDED_RULES, None) or "").split(",") if r.strip()]
    return {EXCLUDED_RULES: ",".join(dict.fromkeys([*rules, PUSH_DOWN_PREDICATES]))}
