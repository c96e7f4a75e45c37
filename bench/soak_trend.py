"""Whether a series of samples stays flat: least-squares slopes over two halves after a warm-up.

The rule (``verdict``): drop the samples of the warm-up, split the rest in two halves by time, fit
a straight line to each half by least squares, and call each half's *growth* its slope times its
length (the fitted change across the half). Then, with ``allowance`` = 10% of the first half's
growth (0 if it fell) plus a noise floor of 1% of the series' median after the warm-up:

- ``flat``: the second half grew at most the allowance;
- ``grows``: it grew more than the allowance by more than two standard errors of its fit;
- ``noisy``: it grew more than the allowance, but within two standard errors: the run cannot tell;
- ``too few samples``: a half holds fewer than 3 samples.

A series that grows by design (an append output's files) is judged on not speeding up instead: its
second half's slope may be at most 10% above the first half's (plus the same floor).

>>> t = [float(m) for m in range(0, 31)]
>>> verdict(t, [100.0 + 10 * min(m, 10) for m in t], warmup_min=5.0)["verdict"]   # rose, then levelled off
'flat'
>>> verdict(t, [100.0 + 10 * m for m in t], warmup_min=5.0)["verdict"]            # a leak: it never stops
'grows'
"""

from __future__ import annotations

import math
import statistics

#: the second half may grow this fraction of the first half's growth
GROWTH_ALLOWED = 0.10
#: growth within this fraction of the series' median counts as none (noise, rounding)
FLOOR = 0.01
MIN_SAMPLES = 3


def warmup_minutes(run_minutes: float) -> float:
    """The default warm-up: the first third of the run or 10 minutes, whichever is less.

    >>> warmup_minutes(3), warmup_minutes(120)
    (1.0, 10.0)
    """
    return min(run_minutes / 3, 10.0)


def fit(t: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares slope of ``y`` over ``t`` and its standard error (0 with fewer than 3 points).

    >>> fit([0.0, 1.0, 2.0], [1.0, 3.0, 5.0])
    (2.0, 0.0)
    """
    n, tm, ym = len(t), statistics.fmean(t), statistics.fmean(y)
    sxx = sum((a - tm) ** 2 for a in t)
    if sxx == 0:
        return 0.0, 0.0
    slope = sum((a - tm) * (b - ym) for a, b in zip(t, y)) / sxx
    if n < 3:
        return slope, 0.0
    residuals = sum((b - ym - slope * (a - tm)) ** 2 for a, b in zip(t, y))
    return slope, math.sqrt(residuals / (n - 2) / sxx)


def _half(t: list[float], y: list[float]) -> dict:
    slope, se = fit(t, y)
    span = t[-1] - t[0]
    return {"samples": len(t), "from_min": t[0], "to_min": t[-1], "slope_per_min": slope,
            "growth": slope * span, "growth_se": se * span}


def verdict(t_min: list[float], values: list[float | None], warmup_min: float, grows_by_design: bool = False) -> dict:
    """Both halves' fits after ``warmup_min`` and the verdict (see the module's docstring)."""
    points = [(t, v) for t, v in zip(t_min, values) if v is not None and t >= warmup_min]
    if len(points) < 2 * MIN_SAMPLES:
        return {"verdict": "too few samples", "samples": len(points)}
    middle = (points[0][0] + points[-1][0]) / 2
    halves = [[p for p in points if p[0] < middle], [p for p in points if p[0] >= middle]]
    if min(len(h) for h in halves) < MIN_SAMPLES:
        return {"verdict": "too few samples", "samples": len(points)}
    first, second = (_half([p[0] for p in h], [p[1] for p in h]) for h in halves)
    floor = FLOOR * abs(statistics.median(p[1] for p in points))
    if grows_by_design:
        allowed_slope = (1 + GROWTH_ALLOWED) * max(first["slope_per_min"], 0.0)
        excess = (second["slope_per_min"] - allowed_slope) * (second["to_min"] - second["from_min"]) - floor
    else:
        excess = second["growth"] - GROWTH_ALLOWED * max(first["growth"], 0.0) - floor
    if excess <= 0:
        word = "flat" if not grows_by_design else "steady"
    else:
        word = "grows" if excess > 2 * second["growth_se"] else "noisy"
        if grows_by_design and word == "grows":
            word = "speeds up"
    return {"verdict": word, "first_half": first, "second_half": second, "floor": floor, "excess": excess}
