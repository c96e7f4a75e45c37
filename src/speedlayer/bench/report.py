"""The lab's results as a terminal table, a JSON file and two PNG plots.

    >>> write_report(results, Path("out/bench"))  # doctest: +SKIP
    {'json': .../bench.json, 'latency_plot': .../latency_vs_throughput.png, 'batch_plot': .../batch_time_vs_size.png}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from speedlayer.bench.advice import Advice, BatchCost
from speedlayer.bench.cell import MAX_BACKLOG_S
from speedlayer.bench.kafka_advice import KafkaAdvice

JSON_NAME = "bench.json"
LATENCY_PLOT = "latency_vs_throughput.png"
BATCH_PLOT = "batch_time_vs_size.png"
COLUMNS = ("output", "trigger", "rate/s", "fed/s", "p50 ms", "p95 ms", "p99 ms", "kept up", "CPU s/M ev", "peak RSS MB",
           "note")


def _num(value: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def cells_table(results: dict[str, Any], title: str | None = None) -> Table:
    """One row per (output, trigger, rate): latency percentiles, whether it kept up, CPU and memory."""
    table = Table(title=title, title_justify="left", caption_justify="left")
    reasons: list[str] = []
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("output", "trigger", "note", "kept up") else "right")
    for c in results["cells"]:
        if c["status"] != "ok":
            if c["reason"] not in reasons:
                reasons.append(c["reason"])
            table.add_row(c["output"], c["mode"], f"{c['rate']:,}", "-", "-", "-", "-", "-", "-", "-",
                          f"{c['status']} [{reasons.index(c['reason']) + 1}]")
            continue
        kept = "yes" if c["kept_up"] else "no"
        note = f"{c['rows_measured']:,} rows" if c["rows_measured"] else "no rows: longer cells"
        if c.get("fell_behind"):
            note += f"; fell {MAX_BACKLOG_S:g} s behind, stopped early"
        elif c.get("drained") is False:
            note += "; backlog left"
        table.add_row(c["output"], c["mode"], f"{c['rate']:,}", _num(c["produced_rate"]), _num(c["p50_ms"]),
                      _num(c["p95_ms"]), _num(c["p99_ms"]), kept, _num(c["cpu_s_per_million_events"], "{:,.1f}"),
                      _num(c["peak_rss_mb"]), note)
    if reasons:
        table.caption = "\n".join(f"[{i}] {r}" for i, r in enumerate(reasons, start=1))
    return table


def sustained_table(results: dict[str, Any]) -> Table:
    table = Table(title="sustained throughput (highest rate kept up with, latency flat)", title_justify="left")
    for column in ("output", "trigger", "sustained events/s", "p99 ms there"):
        table.add_column(column)
    for output, modes in results["sustained"].items():
        for mode, s in modes.items():
            if s["status"] != "ok":
                table.add_row(output, mode, s["status"], "-")
            else:
                table.add_row(output, mode, _num(s["rate"]) if s["rate"] else "none of the rates", _num(s["p99_ms"]))
    return table


def advice_table(advice: Advice | KafkaAdvice) -> Table:
    table = Table(title=f"modes at {advice.rate:,} events/s", title_justify="left")
    for column in ("mode", "meets target", "expected latency", "guarantee", "why"):
        table.add_column(column)
    for v in advice.modes:
        table.add_row(v.mode, "yes" if v.meets else "no", v.expected_latency, v.guarantee, v.why)
    return table


def plot_latency(results: dict[str, Any], path: Path) -> Path:
    """p99 latency (log scale) against the rate fed, one line per trigger, one panel per output."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outputs = list(dict.fromkeys(c["output"] for c in results["cells"]))
    fig, axes = plt.subplots(1, max(1, len(outputs)), figsize=(6 * max(1, len(outputs)), 4.2), squeeze=False)
    for ax, output in zip(axes[0], outputs):
        cells = [c for c in results["cells"] if c["output"] == output and c["status"] == "ok" and c["p99_ms"] is not None]
        for mode in dict.fromkeys(c["mode"] for c in cells):
            pts = sorted((c["produced_rate"], c["p99_ms"], c["p50_ms"], c["kept_up"]) for c in cells if c["mode"] == mode)
            (line,) = ax.plot([p[0] for p in pts], [max(p[1], 0.1) for p in pts], marker="o", label=f"{mode} p99")
            ax.plot([p[0] for p in pts], [max(p[2], 0.1) for p in pts], linestyle=":", marker="v", markersize=4,
                    color=line.get_color())
            for p in pts:
                if not p[3]:
                    ax.plot(p[0], max(p[1], 0.1), marker="x", color="black", markersize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("events/s fed")
        ax.set_ylabel("end-to-end latency, ms (p99 solid, p50 dotted ▽)")
        ax.set_title(f"fleet {output}" + (" (emit latency: commit - window end - watermark)" if output == "windows" else ""),
                     fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if cells:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no cell measured", ha="center", transform=ax.transAxes)
    fig.suptitle("latency vs throughput per trigger (x: did not keep up)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def plot_batches(points: list[tuple[int, int]], cost: BatchCost | None, path: Path) -> Path:
    """Time per micro-batch against its size, with the fitted fixed + per-event cost line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    if points:
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=12, alpha=0.6, label="micro-batches")
    if cost is not None and points:
        top = max(p[0] for p in points)
        ax.plot([0, top], [cost.batch_ms(0), cost.batch_ms(top)], color="C3",
                label=f"fit: {cost.fixed_ms:,.0f} ms + {cost.per_event_us:.2f} µs/event")
    ax.set_xlabel("events in the batch")
    ax.set_ylabel("batch time, ms (triggerExecution)")
    ax.set_title("time per batch vs batch size", fontsize=10)
    ax.grid(True, alpha=0.3)
    if points:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no micro-batch measured", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def write_report(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write bench.json and both plots into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / JSON_NAME}
    paths["json"].write_text(json.dumps(results, indent=2, default=str))
    cost = BatchCost(**results["batch_cost"]) if results.get("batch_cost") else None
    points = [tuple(b) for c in results["cells"] for b in c["batches"]]
    paths["latency_plot"] = plot_latency(results, out_dir / LATENCY_PLOT)
    paths["batch_plot"] = plot_batches(points, cost, out_dir / BATCH_PLOT)
    return paths
