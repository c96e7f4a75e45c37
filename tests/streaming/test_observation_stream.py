"""The per-batch observation behind the latency and dead-letter metrics, as the run's listener receives it."""

import json

from pyspark.sql import functions as F

from speedlayer.decode import observation
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
from speedlayer.runtime import metrics
from speedlayer.runtime.build import build_output
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings

EVENTS, PER_BATCH = 12_000, 4_000
SOURCE = (f"generator://?seed=5&start=2026-11-22T10:00:00Z&rate=2000&vehicles=50&late=0&duplicates=0"
          f"&malformed=0.02&rows_per_batch={PER_BATCH}")


def offset(value) -> int:
    """Events before a position of ``rate-micro-batch`` as a progress report gives it (none: 0)."""
    if value is None:
        return 0
    return int((json.loads(value) if isinstance(value, str) else value)["offset"])


def exact_event_ms_percentiles(spark, plan, start: int, end: int) -> list[float]:
    """Exact p50 / p05 / p01 of the accepted events' times among events ``start`` .. ``end - 1``."""
    raw = plan.source.read_batch(spark, EVENTS).where(F.col("offset").cast("long").between(start, end - 1))
    events = decode(raw, VEHICLE_EVENT).events
    probs = list(metrics.QUANTILES.values())
    return events.select(F.percentile(F.unix_millis("event_time"), F.array(*map(F.lit, probs)))).first()[0]


def test_counts_are_exact_and_sampled_latency_percentiles_stay_close(spark, tmp_path, monkeypatch):
    # 4,000-event batches with a budget of 1,000: one accepted event in four feeds the percentiles
    monkeypatch.setattr(observation, "LATENCY_SAMPLE_EVENTS", 1_000)
    plan = plan_run(RunSettings(job="fleet", source=SOURCE, max_events=EVENTS, state_dir=str(tmp_path / "state"),
                                sinks={"windows": "memory:observed_windows"}))
    run = Run(spark, plan)
    run.start_and_wait()

    query = run.queries[0]
    tracked = run.tracker.get(query.name)
    # the listener's bridge delivered every report of the query, then its end
    assert tracked.terminated and tracked.batches == len(query.recentProgress)

    checked = 0
    for progress in tracked.history:
        source = progress["sources"][0]
        start, end = (offset(source[k]) for k in ("startOffset", "endOffset"))
        end = min(end, EVENTS)  # the generator's rows past --max-events are filtered out before decode
        if start >= end:
            continue
        observed = progress["observedMetrics"]["speedlayer_latency"]
        assert observed["events"] + observed["dead_letters"] == end - start  # every event counted
        exact = exact_event_ms_percentiles(spark, plan, start, end)
        # the batch spans ~4 s of event time (2 s of events, 2 s of disorder); a 1,000-event sample
        # puts each percentile within a few hundred milliseconds of the exact one
        for sampled, truth, tolerance in zip(observed["event_ms"], exact, (150, 300, 400)):
            assert abs(sampled - truth) <= tolerance, (progress["batchId"], observed["event_ms"], exact)
        checked += 1
    assert checked == EVENTS // PER_BATCH
    assert sum(p.get("observedMetrics", {}).get("speedlayer_latency", {}).get("dead_letters", 0)
               for p in tracked.history) > 0


def test_latency_sample_feeds_every_event_of_small_batches_and_a_budget_of_large_ones():
    assert observation.latency_sample(None) == 1.0  # a source that does not cap its batches
    assert observation.latency_sample(observation.LATENCY_SAMPLE_EVENTS) == 1.0
    assert observation.latency_sample(10 * observation.LATENCY_SAMPLE_EVENTS) == 0.1


def test_the_streams_plans_hold_nothing_spark_reseeds_each_batch(spark, tmp_path, monkeypatch):
    # A stream gives every rand/randn/uuid/shuffle a new seed each micro-batch; the seed is a literal
    # in the generated code, so each batch would compile its stage anew and run it cold.
    monkeypatch.setattr(observation, "LATENCY_SAMPLE_EVENTS", 1_000)
    plan = plan_run(RunSettings(job="fleet", source=SOURCE, state_dir=str(tmp_path / "state"),
                                sinks={"windows": "memory:w", "alerts": "memory:a", "dead-letters": "memory:d"}))
    assert observation.latency_sample(plan.source.batch_rows(0)) < 1  # the sampled observation is in the plan
    for planned in plan.queries:
        df = build_output(spark, plan, planned.output.name)
        analyzed = df._jdf.queryExecution().analyzed().toString()
        assert "speedlayer_latency" in analyzed
        for seeded in ("rand(", "randn(", "uuid(", "shuffle("):
            assert seeded not in analyzed, (planned.output.name, seeded)
