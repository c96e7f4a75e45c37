"""``/metrics`` follows Prometheus' naming conventions, checked on a run's full exposition.

The rules are those of Prometheus' "Metric and label naming" page and of its linter (``promtool check
metrics``), written out here: one application prefix, snake_case, base units spelled out, counters
and only counters ending in ``_total``, the suffixes and labels histograms and summaries own left to
them, and no label a scrape sets itself (``job``, ``instance``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from speedlayer.monitor.prometheus import metrics_registry
from speedlayer.runtime.executors import ExecutorRecord, ExecutorWatch
from speedlayer.runtime.progress import ProgressTracker
from speedlayer.sources.base import offsets_behind

DATA = Path(__file__).parents[1] / "runtime" / "data"
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
#: units with a base unit of their own; any prefix of these, or a unit that is not base, is refused
BASE_UNITS = {"seconds", "bytes", "meters", "metres", "grams", "joules", "volts", "amperes", "celsius", "kelvin"}
NOT_BASE = {"minutes", "hours", "days", "weeks", "bits", "miles", "inches", "yards", "pounds", "ounces", "calories",
            "fahrenheit", "kelvins", "rankine"}
PREFIXES = ("pico", "nano", "micro", "milli", "centi", "deci", "deca", "hecto", "kilo", "kibi", "mega", "mebi", "mibi",
            "giga", "gibi", "tera", "tebi", "peta", "pebi")
ABBREVIATIONS = {"s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"}
TYPE_WORDS = {"counter", "gauge", "histogram", "summary"}
#: labels a Prometheus scrape attaches itself: a target's own would be renamed exported_*
SCRAPE_LABELS = {"job", "instance"}


def problems(family) -> list[str]:
    """What breaks the conventions in one parsed metric family (its exposed name, type, help, samples)."""
    name, kind, found = family.name, family.type, []
    exposed = f"{name}_total" if kind == "counter" else name
    words = exposed.split("_")
    if not SNAKE.match(exposed) or not exposed.startswith("speedlayer_"):
        found.append("not snake_case under the speedlayer_ prefix")
    if not family.documentation.strip():
        found.append("no help text")
    if kind != "counter" and words[-1] == "total":
        found.append("_total on a non-counter")
    if TYPE_WORDS & set(words):
        found.append("its type in its name")
    for word in words:
        if word in NOT_BASE or (word not in BASE_UNITS and any(word == p + u for p in PREFIXES for u in BASE_UNITS)):
            found.append(f"unit {word!r} is not a base unit")
        if word in ABBREVIATIONS:
            found.append(f"abbreviated unit {word!r}")
    if kind not in ("histogram", "summary") and words[-1] in ("count", "sum", "bucket"):
        found.append(f"_{words[-1]} belongs to histograms and summaries")
    for sample in family.samples:
        for label in sample.labels:
            if label in SCRAPE_LABELS or label.startswith("__") or not SNAKE.match(label):
                found.append(f"label {label!r}")
            if (label == "le" and kind != "histogram") or (label == "quantile" and kind != "summary"):
                found.append(f"label {label!r} belongs to {'histograms' if label == 'le' else 'summaries'}")
    return found


def exposition() -> str:
    """A run's ``/metrics`` with every family filled: a query's recorded batches, a late query, executors."""
    tracker = ProgressTracker(source_lag=offsets_behind)
    for progress in (*json.loads((DATA / "fleet_windows_progress.json").read_text()),
                     *json.loads((DATA / "fleet_late_progress.json").read_text())):
        tracker.record(progress)
    lists = iter([[ExecutorRecord("driver"), ExecutorRecord("0", cores=2), ExecutorRecord("1", cores=2)],
                  [ExecutorRecord("driver"), ExecutorRecord("0", cores=2)]])
    watch = ExecutorWatch(lambda: next(lists), local=False)
    watch.poll()
    watch.poll(force=True)
    return generate_latest(metrics_registry("fleet", tracker, watch)).decode()


def test_every_metric_and_label_follows_prometheus_naming():
    families = list(text_string_to_metric_families(exposition()))
    labels = {label for f in families for s in f.samples for label in s.labels}
    assert len(families) >= 20 and {"speedlayer_job", "query", "operator", "since", "phase", "le"} <= labels
    assert {f.name: problems(f) for f in families if problems(f)} == {}


def test_the_rules_catch_what_they_are_for():
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def family(kind, name, labels, doc="help"):
        metric = kind(name, doc, labels=list(labels))
        metric.add_metric(list(labels.values()), 1.0)
        return next(text_string_to_metric_families(generate_latest(_Registry(metric)).decode()))

    assert problems(family(GaugeMetricFamily, "speedlayer_latency_seconds", {"quantile": "0.99"})) == [
        "label 'quantile' belongs to summaries"]
    assert problems(family(GaugeMetricFamily, "speedlayer_rows", {"job": "fleet"})) == ["label 'job'"]
    assert problems(family(GaugeMetricFamily, "speedlayer_delay_milliseconds", {})) == [
        "unit 'milliseconds' is not a base unit"]
    assert problems(family(GaugeMetricFamily, "speedlayer_delay_ms", {})) == ["abbreviated unit 'ms'"]
    assert problems(family(GaugeMetricFamily, "speedlayer_rows_total", {})) == ["_total on a non-counter"]
    assert problems(family(GaugeMetricFamily, "speedlayer_batchCount", {})) == [
        "not snake_case under the speedlayer_ prefix"]
    assert problems(family(CounterMetricFamily, "speedlayer_batches", {"speedlayer_job": "fleet"})) == []


class _Registry:
    """A registry of one family, for the checks above."""

    def __init__(self, metric):
        self.metric = metric

    def collect(self):
        yield self.metric
