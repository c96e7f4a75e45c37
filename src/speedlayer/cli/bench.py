"""``speedlayer bench`` and ``speedlayer advise``: measure latency and throughput, recommend a trigger."""

from __future__ import annotations

import dataclasses

import typer

from speedlayer.cli.console import err, out
from speedlayer.core.errors import ConfigError


def bench_command(
    out_dir: str = typer.Option("bench-out", "--out", help="directory for bench.json and the PNG plots"),
    quick: bool = typer.Option(False, "--quick",
                               help="one small rate (2,000/s), 3 s cells, 2 s windows: "
                                    "every trigger in under 3 minutes on 2 idle cores; with --kafka: 1,000/s, "
                                    "10 s warm-up, 20 s measured, every mode in about 4 minutes"),
    output: list[str] | None = typer.Option(None, "--output", help="windows | alerts (repeatable; default both)"),
    mode: list[str] | None = typer.Option(None, "--mode",
                                          help="trigger to measure (repeatable; default: processing:0s, processing:100ms, "
                                               "processing:1s, processing:5s, available-now, continuous:1s, realtime: (its "
                                               "interval the cell's); with --kafka: continuous:1s, realtime:1min, "
                                               "processing:0s)"),
    rate: list[int] | None = typer.Option(None, "--rate", help="input rate in events/s (repeatable; default 1000, 10000, "
                                          "50000, 100000; with --kafka 1000, 10000)"),
    cell_seconds: float | None = typer.Option(None, "--cell-seconds", help="how long each cell feeds events (default "
                                              "30; with --kafka: how long it is measured after the warm-up, 60)"),
    warmup_seconds: float | None = typer.Option(None, "--warmup-seconds", help="first seconds of a cell not measured "
                                                "(default 5; with --kafka 20)"),
    window: str | None = typer.Option(None, "--window", help="tumbling window of the windows output (default 10s; --quick 2s)"),
    watermark: str | None = typer.Option(None, "--watermark", help="watermark delay (default 5s; --quick 1s)"),
    schedule_seconds: float | None = typer.Option(None, "--schedule-seconds", help="available-now: a run every N seconds"),
    master: str | None = typer.Option(None, "--master", help="Spark master (default local[2])"),
    kafka: str | None = typer.Option(None, "--kafka", metavar="HOST:PORT",
                                     help="measure the alerts Kafka -> Kafka on this broker instead, in continuous, "
                                          "real-time and micro-batch mode, as a Kafka consumer sees the latency"),
    dedup: list[str] | None = typer.Option(None, "--dedup", help="with --kafka: exact | fast, the micro-batch cells' "
                                           "dedup (repeat to measure both; default exact)"),
    rounds: int = typer.Option(1, "--rounds", help="with --kafka: measure every cell this many times (a p99 "
                               "moves between runs; advise --from reads each rate's median round)"),
) -> None:
    """Measure end-to-end latency, sustained throughput, CPU and memory per output, trigger and input rate."""
    if kafka is not None:
        from pathlib import Path

        from speedlayer.bench.kafka_command import execute_kafka_bench

        execute_kafka_bench(kafka, tuple(mode or ()), tuple(rate or ()), warmup_seconds, cell_seconds,
                            master or "local[2]", Path(out_dir), out, err, tuple(dedup or ()), rounds, quick)
        return
    if dedup:
        raise ConfigError("--dedup measures the micro-batch cells of a Kafka bench: give --kafka HOST:PORT with it")
    if rounds != 1:
        raise ConfigError("--rounds repeats the cells of a Kafka bench: give --kafka HOST:PORT with it")
    from speedlayer.bench.lab import LabConfig

    cfg = LabConfig.quick() if quick else LabConfig()
    given = {"outputs": tuple(output or ()), "modes": tuple(mode or ()), "rates": tuple(rate or ()),
             "cell_s": cell_seconds, "warmup_s": warmup_seconds, "window": window, "watermark": watermark,
             "schedule_s": schedule_seconds, "master": master}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in given.items() if v not in (None, ())})
    cfg.check()
    from pathlib import Path

    from speedlayer.bench.command import execute_bench

    execute_bench(cfg, Path(out_dir), out, err)


def advise_command(
    rate: int = typer.Option(..., "--rate", help="target input rate, events/s"),
    latency: str | None = typer.Option(None, "--latency", help="target end-to-end latency, e.g. 500ms or 2s"),
    output: str | None = typer.Option(None, "--output", help="windows | alerts (default windows; alerts with --from "
                                      "a kafka-latency.json, which measures the alerts)"),
    headroom: float = typer.Option(0.7, "--headroom", help="share of the interval a batch may take (0-1]"),
    from_json: str | None = typer.Option(None, "--from", help="a bench.json (fit the batch cost from it instead of "
                                         "measuring) or a kafka-latency.json (choose the mode by its measured latency)"),
    size: list[int] | None = typer.Option(None, "--size",
                                          help="events per batch to measure (repeatable; default 5000, 20000, 60000)"),
    batches: int = typer.Option(3, "--batches", help="measured batches per size"),
    window: str = typer.Option("10s", "--window", help="tumbling window of the windows output"),
    watermark: str = typer.Option("5s", "--watermark", help="watermark delay"),
    out_dir: str | None = typer.Option(None, "--out", help="also draw time per batch vs batch size into this directory"),
    master: str = typer.Option("local[2]", "--master", help="Spark master"),
) -> None:
    """Recommend a trigger interval and maxRecordsPerTrigger for a target rate, and the modes that meet a latency."""
    from pathlib import Path

    from speedlayer.core.durations import positive_duration

    if output not in (None, "windows", "alerts"):
        raise ConfigError(f"--output {output!r}: choose windows or alerts")
    if not 0 < headroom <= 1:
        raise ConfigError("--headroom is the share of the interval a batch may take: between 0 and 1")
    if rate <= 0 or batches <= 0 or any(s <= 0 for s in size or ()):
        raise ConfigError("--rate, --batches and --size must be above zero")
    latency_ms = positive_duration(latency, "--latency") if latency else None
    sizes = list(size or (5_000, 20_000, 60_000))
    if from_json is None and len(set(sizes)) < 2:
        raise ConfigError("give at least two different --size values to fit a batch cost")
    from speedlayer.bench.command import execute_advise

    execute_advise(rate, latency_ms, output, headroom, Path(from_json) if from_json else None, sizes, batches,
                   window, watermark, master, Path(out_dir) if out_dir else None, out, err)
