"""From time per batch vs batch size to a trigger recommendation: pure arithmetic, no Spark.

A micro-batch costs about ``fixed_ms + per_event_ms * events`` (planning, state and checkpoint
commits, task launch, then the work per event). At a steady ``rate`` and a trigger interval ``T``
a batch holds ``rate * T`` events; the stream keeps up with room to spare when a batch takes at
most ``headroom * T``::

    fixed + per_event * rate * T <= headroom * T   =>   T >= fixed / (headroom - per_event * rate)

so the shortest safe interval exists only while ``per_event * rate < headroom``.

    >>> fit = fit_batch_cost([(10_000, 500.0), (50_000, 700.0)])
    >>> round(fit.fixed_ms), round(fit.per_event_us, 1)
    (450, 5.0)
    >>> recommend(fit, rate=20_000, target_latency_ms=2_000).interval_ms   # 450 / (0.7 - 0.1) = 750 ms
    800
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: share of the interval a batch may take at the target rate (the rest absorbs bursts and hiccups)
DEFAULT_HEADROOM = 0.7
#: interval grid: 100 ms steps up to 1 s, 500 ms steps up to 5 s, whole seconds above
_GRID = ((1_000, 100), (5_000, 500), (math.inf, 1_000))


@dataclass(frozen=True)
class BatchCost:
    """``batch_ms ~ fixed_ms + per_event_us / 1000 * events``, fitted by least squares over ``points``."""

    fixed_ms: float
    per_event_us: float
    points: int
    r2: float | None = None

    def batch_ms(self, events: float) -> float:
        return self.fixed_ms + self.per_event_us / 1000 * events


def fit_batch_cost(points: list[tuple[float, float]]) -> BatchCost:
    """Least-squares line through (events in batch, batch ms); costs below zero are clamped to zero.

    >>> fit_batch_cost([(0, 400), (1000, 401), (2000, 402)]).per_event_us
    1.0
    """
    pts = [(float(x), float(y)) for x, y in points]
    if len(pts) < 2 or len({x for x, _ in pts}) < 2:
        raise ValueError("fitting a batch cost needs batches of at least two different sizes")
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    intercept = my - slope * mx
    syy = sum((y - my) ** 2 for _, y in pts)
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else None
    return BatchCost(max(0.0, intercept), max(0.0, slope * 1000), n, r2)


def round_up_interval(ms: float) -> int:
    """The next interval on the grid at or above ``ms`` (at least 100 ms).

    >>> round_up_interval(130), round_up_interval(1200), round_up_interval(5200)
    (200, 1500, 6000)
    """
    ms = max(round(ms, 6), 1.0)  # 700 / 0.7 is 1000.0000000000001 in floating point: still 1 s
    for upper, step in _GRID:
        if ms <= upper:
            return int(math.ceil(ms / step) * step)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class ModeVerdict:
    """Whether a mode can meet the target latency, what latency to expect, and what it guarantees."""

    mode: str
    meets: bool
    expected_latency: str
    guarantee: str
    why: str


@dataclass(frozen=True)
class Advice:
    rate: int
    headroom: float
    cost: BatchCost
    #: most events/s the job keeps up with at this headroom (as the interval grows without bound)
    capacity_rate: float
    interval_ms: int | None = None
    max_records_per_trigger: int | None = None
    batch_events: int | None = None
    batch_ms: float | None = None
    #: worst-case latency of a micro-batch at ``interval_ms``: wait for the trigger, then the batch
    worst_latency_ms: float | None = None
    problem: str | None = None
    modes: list[ModeVerdict] = field(default_factory=list)

    @property
    def trigger(self) -> str | None:
        return None if self.interval_ms is None else f"processing:{_fmt(self.interval_ms)}"


def _fmt(ms: float) -> str:
    """``_fmt(800) == '800ms'``, ``_fmt(1500) == '1.5s'``, ``_fmt(7704) == '7.7s'``."""
    return f"{round(ms / 1000, 1):g}s" if ms >= 1000 else f"{ms:.0f}ms"


def recommend(cost: BatchCost, rate: int, target_latency_ms: float | None = None, headroom: float = DEFAULT_HEADROOM,
              stateful: bool = False, kafka: bool = False) -> Advice:
    """The shortest trigger interval that keeps up with ``rate`` with headroom, and a verdict per mode.

    ``maxRecordsPerTrigger`` caps a batch at what one interval can process (``(T - fixed) / per_event``),
    so a backlog after a pause drains in batches that still end within their interval. ``stateful``:
    the output keeps state (windows), which only micro-batch modes run. A window output emits a
    window one batch after the watermark passes it, so its worst case counts one interval more.

    >>> recommend(BatchCost(450, 5.0, 2), rate=200_000).problem[:40]
    'at 200,000 events/s each event alone tak'
    """
    if not 0 < headroom <= 1:
        raise ValueError("headroom is the share of the interval a batch may take: between 0 and 1")
    if rate <= 0:
        raise ValueError("the target rate must be above zero events/s")
    per_event_ms = cost.per_event_us / 1000
    capacity = headroom / per_event_ms * 1000 if per_event_ms > 0 else math.inf
    advice = dict(rate=rate, headroom=headroom, cost=cost, capacity_rate=capacity)
    load = per_event_ms * rate / 1000  # ms of work per ms of wall time
    if load >= headroom:
        problem = (f"at {rate:,} events/s each event alone takes {load:.0%} of the time (headroom {headroom:.0%}): "
                   f"this job sustains about {capacity:,.0f} events/s here: add cores, or lower the rate per query")
        verdicts = _verdicts(None, target_latency_ms, stateful, kafka, cost)
        return Advice(**advice, problem=problem, modes=verdicts)
    interval = round_up_interval(cost.fixed_ms / (headroom - load))
    batch_events = math.ceil(rate * interval / 1000)
    batch_ms = cost.batch_ms(batch_events)
    max_records = max(batch_events, math.floor((interval - cost.fixed_ms) / per_event_ms)) if per_event_ms > 0 else None
    worst = (2 if stateful else 1) * interval + batch_ms
    return Advice(**advice, interval_ms=interval, max_records_per_trigger=max_records, batch_events=batch_events,
                  batch_ms=batch_ms, worst_latency_ms=worst,
                  modes=_verdicts(worst, target_latency_ms, stateful, kafka, cost, interval))


def _verdicts(worst_ms: float | None, target_ms: float | None, stateful: bool, kafka: bool, cost: BatchCost,
              interval_ms: int | None = None) -> list[ModeVerdict]:
    def meets(expected: float | None) -> bool:
        return expected is not None and (target_ms is None or expected <= target_ms)

    out = []
    if worst_ms is None:
        out.append(ModeVerdict("micro-batch", False, "-", "exactly-once (replayable source, exactly-once sink)",
                               "cannot keep up at this rate"))
    else:
        out.append(ModeVerdict(f"micro-batch processing:{_fmt(interval_ms)}", meets(worst_ms), f"<= {_fmt(worst_ms)}",
                               "exactly-once (replayable source, exactly-once sink); every operation",
                               "wait for the next trigger, then one batch" + (" (+1 interval: the watermark closes "
                                                                              "windows in the batch after)" if stateful else "")))
    if stateful:
        out.append(ModeVerdict("continuous:1s", False, "-", "at-least-once; map-like operations only",
                               "this output keeps state (windows, dedup), which continuous mode cannot run"))
    else:
        out.append(ModeVerdict("continuous:1s", target_ms is None or target_ms >= 10, "~1-10 ms to a per-row sink (Kafka); "
                               "up to the epoch interval to commit-visible sinks (memory, console)",
                               "at-least-once; map-like operations only, JVM sinks only",
                               "rows flow through long-running tasks; epochs commit every interval "
                               "(its throughput is not in this fit: measure it with speedlayer bench)"))
    if not kafka:
        out.append(ModeVerdict("realtime", False, "-", "at-least-once (Kafka sink); update mode",
                               "needs a Kafka source and Spark's Kafka connector"))
    else:
        out.append(ModeVerdict("realtime:5min", not stateful, "tens of ms (rows processed as they arrive)",
                               "at-least-once (Kafka sink); update mode; Spark's operator allowlist",
                               "Kafka source, console or Kafka sink" + ("; not this output: dedup is not on the "
                                                                        "allowlist" if stateful else "")))
    startup_ms = max(cost.fixed_ms * 4, 2_000)  # a fresh query plans and runs its first batch slowly
    out.append(ModeVerdict("available-now (scheduled)", target_ms is not None and target_ms >= 2 * startup_ms,
                           f">= schedule period + ~{_fmt(startup_ms)} start-up",
                           "exactly-once; every operation; no cluster between runs",
                           "a batch job run by a scheduler: cheapest when minutes of latency are fine"))
    return out
