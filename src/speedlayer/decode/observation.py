"""The per-batch observation decode attaches to a micro-batch query, and its sampling.

Spark computes it inside each batch (``DataFrame.observe``): rows refused, events accepted, the
percentiles of event and ingest time, the newest event time. ``speedlayer.runtime.metrics`` reads
it back from the progress report; it lives here so that decode needs nothing of the monitor.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

#: the name of the observation the runner adds to every micro-batch query
OBSERVATION = "speedlayer_latency"
#: the name of the observation on a job's ``late`` output: rows it writes per batch
LATE_OBSERVATION = "speedlayer_late"
#: percentiles asked of event and ingest time; latency p50/p95/p99 read them in this order
QUANTILES = {"p50": 0.5, "p95": 0.05, "p99": 0.01}


#: events per batch that feed the latency percentiles: a batch the source can make larger feeds
#: them a sample of about this many (``sampled_by``; feeding all 100,000 events of a fleet batch to the
#: percentile sketches cost ~5% of the job's CPU); smaller batches feed every event
LATENCY_SAMPLE_EVENTS = 10_000


def latency_sample(batch_rows: int | None) -> float:
    """The fraction of events that feeds the latency percentiles, for batches of at most ``batch_rows``.

    >>> latency_sample(None), latency_sample(5_000), latency_sample(100_000)
    (1.0, 1.0, 0.1)
    """
    if batch_rows is None or batch_rows <= LATENCY_SAMPLE_EVENTS:
        return 1.0
    return LATENCY_SAMPLE_EVENTS / batch_rows


#: resolution of ``sampled_by``'s draw (a hash modulo this)
_SAMPLE_SCALE = 1_000_000


def sampled_by(keys: list[Column], fraction: float) -> Column | None:
    """Whether a row is in a ``fraction`` sample, drawn by a hash of ``keys``; None when every row is.

    A hash, not ``rand()``: a stream re-seeds ``rand`` every micro-batch, and a new seed is new
    generated code to compile (see ``speedlayer.sources.generator_kit.fence``). Decode hashes an
    event's typed fields (a few short values, not the whole payload); the row's position
    (``monotonically_increasing_id``) would hash nothing, but a stream refuses it.

    >>> sampled_by([F.col("id"), F.col("t")], 0.1)  # doctest: +SKIP
    Column<'<(pmod(xxhash64(id, t), 1000000), 100000)'>
    """
    if fraction >= 1:
        return None
    return F.pmod(F.xxhash64(*keys), F.lit(_SAMPLE_SCALE)) < int(fraction * _SAMPLE_SCALE)


def observe_latency(df: DataFrame, name: str, valid: Column | None, event_time: Column, ingest_time: Column,
                    sampled: Column | None = None) -> DataFrame:
    """``df`` with the observation ``name`` the runner asks decode to attach (see ``decode(observe=...)``):
    rows refused, events accepted, percentiles of their event and ingest time, newest event time.

    ``valid``, ``event_time`` and ``ingest_time`` are columns of ``df``; ``valid`` tells an accepted
    event from a refused row (None: every row is an event, and refused rows are not counted). The
    percentiles read the accepted events for which ``sampled`` is true (all when it is None; see
    ``latency_sample``); the counts and the newest event time read every row. Observed metrics are
    computed by Spark while it runs the batch (no extra job) and arrive in the progress report
    under ``observedMetrics``.

    What the percentile sketches read is computed first as columns (``_obs_*``, for the caller to
    drop): Spark feeds a sketch by evaluating its input expression row by row, interpreted, while
    a column is generated code. The counts and the maximum are generated code as they are.

    >>> observe_latency(checked, OBSERVATION, F.col("_valid"), F.col("t"), F.col("ingest_time"))  # doctest: +SKIP
    """
    accepted = F.lit(True) if valid is None else valid
    sampled = accepted if sampled is None else accepted & sampled
    inputs = df.select("*", F.when(sampled, F.unix_millis(event_time)).alias("_obs_event_ms"),
                       F.when(sampled, F.unix_millis(ingest_time)).alias("_obs_ingest_ms"))
    probs = F.array(*(F.lit(q) for q in QUANTILES.values()))
    # count(CASE ...) rather than count_if, which Spark rewrites through a projection of its own
    counts = [F.count(F.when(accepted, 1)).alias("events")]
    if valid is not None:
        counts.append(F.count(F.when(~valid, 1)).alias("dead_letters"))
    return inputs.observe(
        name, *counts,
        F.percentile_approx("_obs_event_ms", probs, 1000).alias("event_ms"),
        F.percentile_approx("_obs_ingest_ms", probs, 1000).alias("ingest_ms"),
        F.max(F.when(accepted, F.unix_millis(event_time))).alias("max_event_ms"),
    )


def observed_decode(df: DataFrame, observe: str | None, event_time: Column, valid: Column | None = None,
                    latency_sample: float = 1.0, keys: list[Column] | None = None) -> DataFrame:
    """``df`` with decode's per-batch observation ``observe`` attached (None: ``df`` as it is), for a
    job's own decoder: the runner passes ``observe`` and ``latency_sample`` to a decoder that takes them.

    Give it the frame both the events and the dead letters are selected from, ``valid`` telling them
    apart, so that every query of the job counts both, as speedlayer's decoders do; ``event_time``
    is the event's time (a timestamp column) and ``ingest_time`` a column of ``df``. ``keys`` are
    hashed to draw the latency sample (default: event and ingest time).

    >>> checked = observed_decode(checked, observe, F.col("_time"), valid=F.col("_reason").isNull(),
    ...                           latency_sample=latency_sample)  # doctest: +SKIP
    """
    if not observe:
        return df
    sample = sampled_by(keys or [event_time, F.col("ingest_time")], latency_sample)
    observed = observe_latency(df, observe, valid, event_time, F.col("ingest_time"), sample)
    return observed.drop("_obs_event_ms", "_obs_ingest_ms")
