"""From measured Kafka latencies to a mode: which processing mode meets a rate and a p99 target, and at what cost.

``speedlayer bench --kafka`` writes ``kafka-latency.json``: per (mode, rate) the alerts' latency as a
Kafka consumer computes it. For a target rate each mode is judged on the cell measured at the nearest
rate at or above it (or the highest measured, said so; of a rate measured in several rounds, the round
with the median p99); a mode meets the target when that cell ran and its p99 is at most the target.
Micro-batch cells measured with ``--dedup fast`` (``speedlayer bench --kafka --dedup exact --dedup
fast``) are a mode of their own. Of the modes that meet it, the one that gives up least is recommended:
micro-batch (exactly once, every operation), then micro-batch with ``--dedup fast`` (a replay may keep
another copy of a re-sent ping), then real-time, then continuous.

    >>> cells = [{"side": "speedlayer", "mode": "processing:0s", "rate": 1000, "p50_ms": 600.0, "p99_ms": 1150.0,
    ...           "p999_ms": 1300.0, "status": "ok"},
    ...          {"side": "speedlayer", "mode": "realtime:1min", "rate": 1000, "p50_ms": 1.0, "p99_ms": 2.0,
    ...           "p999_ms": 206.0, "status": "ok"}]
    >>> kafka_advice(cells, rate=1000, target_latency_ms=2000).recommended
    'processing:0s'
    >>> kafka_advice(cells, rate=1000, target_latency_ms=50).recommended
    'realtime:1min'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from speedlayer.bench.advice import ModeVerdict
from speedlayer.bench.kafka_latency import cell_label
from speedlayer.runtime.triggers import parse_trigger

#: what each mode keeps and what it gives up, for an output read from and written to Kafka
GUARANTEES = {
    "processing": ("exactly-once (kafka:// sink, Kafka transactions); every operation", ""),
    "realtime": ("at-least-once (Spark's Kafka sink); stateless operators on Spark's allowlist",
                 "exactly-once, and state beyond the allowlist"),
    "continuous": ("at-least-once (Spark's Kafka sink); map-like operations only",
                   "exactly-once, and every stateful operation"),
}
#: micro-batch with ``--dedup fast``: what it keeps and gives up beside the default's
FAST_DEDUP = (GUARANTEES["processing"][0] + "; of a ping's copies in one batch, the first Spark meets",
              "the same copy of a re-sent ping on every replay (--dedup exact)")
#: the order in which a mode that meets the target is preferred: the one that gives up least first
PREFERENCE = (("processing", "exact"), ("processing", "fast"), ("realtime", None), ("continuous", None))


@dataclass(frozen=True)
class KafkaAdvice:
    rate: int
    target_latency_ms: float | None
    modes: list[ModeVerdict] = field(default_factory=list)
    #: the trigger to run with, None when no measured mode meets the target
    recommended: str | None = None
    #: what the recommendation gives up against micro-batch ("" for micro-batch itself)
    gives_up: str = ""


def kafka_advice(cells: Iterable[Mapping[str, Any]], rate: int, target_latency_ms: float | None,
                 stateful: bool = False) -> KafkaAdvice:
    """Judge every measured mode at ``rate`` against ``target_latency_ms`` (p99) and recommend one.

    ``stateful``: the output keeps state (windows, dedup), which only micro-batch runs; the Kafka
    cells measure the stateless alerts, so for a stateful output they bound its latency from below.
    """
    ours = [c for c in cells if c.get("side", "speedlayer") == "speedlayer"]
    if not ours:
        raise ValueError("no cell of speedlayer's side to advise from")
    verdicts, meeting = [], []
    for run in dict.fromkeys(map(_run, ours)):
        (trigger, dedup), kind = run, parse_trigger(run[0]).kind
        mode = cell_label(trigger, dedup)
        cell, note = _nearest(_median_per_rate([c for c in ours if _run(c) == run]), rate)
        keeps, gives_up = FAST_DEDUP if dedup == "fast" else GUARANTEES.get(kind, ("", ""))
        if stateful and kind != "processing":
            verdicts.append(ModeVerdict(mode, False, "-", keeps, "this output keeps state, which this mode cannot run"))
            continue
        if cell.get("status") != "ok" or cell.get("p99_ms") is None:
            verdicts.append(ModeVerdict(mode, False, "-", keeps, f"did not run at {cell['rate']:,}/s: "
                                        f"{cell.get('reason') or cell.get('status')}"))
            continue
        meets = target_latency_ms is None or cell["p99_ms"] <= target_latency_ms
        expected = f"p50 {cell['p50_ms']:,.0f} / p99 {cell['p99_ms']:,.0f} / p99.9 {cell['p999_ms']:,.0f} ms"
        why = f"measured at {cell['rate']:,}/s{note}" + (f"; gives up {gives_up}" if gives_up else "")
        verdicts.append(ModeVerdict(mode, meets, expected, keeps, why))
        if meets:
            rank = PREFERENCE.index((kind, dedup)) if (kind, dedup) in PREFERENCE else len(PREFERENCE)
            meeting.append((rank, cell["p99_ms"], mode, gives_up))
    best = min(meeting, default=None)
    return KafkaAdvice(rate, target_latency_ms, verdicts, best[2] if best else None, best[3] if best else "")


def _run(cell: Mapping[str, Any]) -> tuple[str, str | None]:
    """(trigger, dedup) of a cell: micro-batch cells of files written before ``--dedup`` ran the exact one."""
    micro_batch = parse_trigger(cell["mode"]).kind == "processing"
    return cell["mode"], (cell.get("dedup") or "exact") if micro_batch else None


def _median_per_rate(cells: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One cell per rate, by rate: of a run's rounds (``--rounds``) the one with the median p99 of those
    that ran (the higher middle one of an even count), or the first when none ran.

    >>> [c["p99_ms"] for c in _median_per_rate([{"rate": 1000, "p99_ms": p, "status": "ok"} for p in (9, 30, 12)])]
    [12]
    """
    by_rate: dict[int, list[Mapping[str, Any]]] = {}
    for cell in cells:
        by_rate.setdefault(cell["rate"], []).append(cell)
    picked = []
    for rate in sorted(by_rate):
        ran = sorted((c for c in by_rate[rate] if c.get("status") == "ok" and c.get("p99_ms") is not None),
                     key=lambda c: c["p99_ms"])
        picked.append(ran[len(ran) // 2] if ran else by_rate[rate][0])
    return picked


def _nearest(cells: list[Mapping[str, Any]], rate: int) -> tuple[Mapping[str, Any], str]:
    """The cell measured at the lowest rate at or above ``rate``, else the highest, with a note saying so."""
    for cell in cells:
        if cell["rate"] >= rate:
            return cell, ""
    return cells[-1], f" (measured up to {cells[-1]['rate']:,}/s only: at {rate:,}/s expect more)"


def is_kafka_results(results: Mapping[str, Any]) -> bool:
    """Whether a results file is ``kafka-latency.json`` (cells per side and mode) rather than a ``bench.json``."""
    cells = results.get("cells") or []
    return bool(cells) and all("mode" in c and "p99_ms" in c and "output" not in c for c in cells)
