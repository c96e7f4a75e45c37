"""The recommendation math of ``speedlayer advise`` and the lab's statistics, without Spark."""

import math

import pytest

from speedlayer.bench.advice import BatchCost, fit_batch_cost, recommend, round_up_interval
from speedlayer.bench.cell import percentile, slope
from speedlayer.bench.lab import LabConfig
from speedlayer.core.errors import ConfigError


def test_fit_recovers_fixed_and_per_event_cost():
    points = [(n, 450 + 0.004 * n) for n in (5_000, 20_000, 60_000, 60_000)]
    cost = fit_batch_cost(points)
    assert cost.fixed_ms == pytest.approx(450)
    assert cost.per_event_us == pytest.approx(4.0)
    assert cost.r2 == pytest.approx(1.0)
    assert cost.points == 4


def test_fit_needs_two_batch_sizes():
    with pytest.raises(ValueError, match="two different sizes"):
        fit_batch_cost([(1000, 500), (1000, 520)])


@pytest.mark.parametrize("ms,expected", [(1, 100), (100, 100), (101, 200), (999, 1000), (1001, 1500), (4999, 5000),
                                         (5001, 6000)])
def test_intervals_round_up_to_the_grid(ms, expected):
    assert round_up_interval(ms) == expected


@pytest.mark.parametrize("rate", [1_000, 20_000, 60_000, 120_000])
def test_recommended_interval_is_the_shortest_grid_step_that_keeps_headroom(rate):
    cost = BatchCost(fixed_ms=450, per_event_us=4.0, points=3)
    advice = recommend(cost, rate, headroom=0.7)
    t = advice.interval_ms
    assert cost.batch_ms(rate * t / 1000) <= 0.7 * t
    smaller = [g for g in range(100, t, 100) if round_up_interval(g) == g]
    assert all(cost.batch_ms(rate * g / 1000) > 0.7 * g for g in smaller)
    # a catch-up batch of maxRecordsPerTrigger still ends within one interval
    assert cost.batch_ms(advice.max_records_per_trigger) <= t + 1e-6
    assert advice.max_records_per_trigger >= advice.batch_events == math.ceil(rate * t / 1000)
    assert advice.trigger == f"processing:{t / 1000:g}s" if t >= 1000 else advice.trigger == f"processing:{t}ms"


def test_a_rate_beyond_capacity_gets_no_interval_and_says_the_capacity():
    advice = recommend(BatchCost(450, 10.0, 3), rate=100_000, headroom=0.7)
    assert advice.interval_ms is None and advice.max_records_per_trigger is None
    assert advice.capacity_rate == pytest.approx(70_000)
    assert "sustains about 70,000 events/s" in advice.problem
    assert not advice.modes[0].meets


def test_verdicts_follow_the_target_latency_and_what_the_output_needs():
    cost = BatchCost(400, 2.0, 3)
    windows = recommend(cost, 10_000, target_latency_ms=500, stateful=True)
    by_mode = {v.mode.split(" ")[0].split(":")[0]: v for v in windows.modes}
    assert not by_mode["micro-batch"].meets  # 2 x 500 ms + the batch > 500 ms
    assert not by_mode["continuous"].meets and "keeps state" in by_mode["continuous"].why
    assert not by_mode["realtime"].meets and "Kafka" in by_mode["realtime"].why
    relaxed = recommend(cost, 10_000, target_latency_ms=10_000, stateful=True)
    assert relaxed.modes[0].meets and "exactly-once" in relaxed.modes[0].guarantee
    alerts = recommend(cost, 10_000, target_latency_ms=50)
    cont = next(v for v in alerts.modes if v.mode.startswith("continuous"))
    assert cont.meets and "at-least-once" in cont.guarantee


def test_headroom_and_rate_are_checked():
    with pytest.raises(ValueError):
        recommend(BatchCost(1, 1, 2), 1000, headroom=1.5)
    with pytest.raises(ValueError):
        recommend(BatchCost(1, 1, 2), 0)


def test_percentile_and_slope():
    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50, 95, 99)
    assert slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2)
    assert slope([(1, 1), (1, 2)]) is None


@pytest.mark.parametrize("change,match", [
    ({"outputs": ("sliding",)}, "not 'sliding'"),
    ({"modes": ("soon",)}, "unknown trigger"),
    ({"rates": (0,)}, "above zero"),
    ({"warmup_s": 9, "cell_s": 5}, "shorter than a cell"),
])
def test_lab_config_refuses_bad_settings(change, match):
    import dataclasses

    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(LabConfig(), **change).check()


def test_a_fit_without_per_event_cost_still_gives_an_interval_but_no_cap():
    advice = recommend(BatchCost(fixed_ms=700, per_event_us=0.0, points=4), rate=20_000, headroom=0.7)
    assert advice.interval_ms == 1000 and advice.max_records_per_trigger is None
    assert math.isinf(advice.capacity_rate)
