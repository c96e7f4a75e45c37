"""What ``speedlayer bench --kafka HOST:PORT`` does: the alerts Kafka -> Kafka in each processing mode, the
latency as a Kafka consumer computes it (``speedlayer.bench.kafka_latency``), a table and a JSON file."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import get_args

from rich.console import Console
from rich.table import Table

from speedlayer.bench.kafka_latency import (
    KAFKA_MODES,
    KafkaCell,
    bench_cells,
    cell_line,
    cells_json,
    kafka_session,
    run_kafka_bench,
)
from speedlayer.core.errors import ConfigError
from speedlayer.runtime.settings import RunSettings
from speedlayer.runtime.triggers import parse_trigger
from speedlayer.sources.kafka import check_brokers

RATES = (1_000, 10_000)
#: ``--quick``'s rate, warm-up and measured seconds: every mode in about four minutes
QUICK = ((1_000,), 10.0, 20.0)
#: what --dedup takes: which copy of a re-sent ping the micro-batch cells keep (the run's own choices)
DEDUPS = get_args(RunSettings.model_fields["dedup"].annotation)
#: the file the run writes into its --out directory
KAFKA_JSON = "kafka-latency.json"


def cells_table(cells: list[KafkaCell]) -> Table:
    table = Table(title="fleet alerts, Kafka -> Kafka: output append time - input append time (ms)",
                  title_justify="left")
    rounds = any(c.round > 1 for c in cells)
    for column in ("mode", "rate/s", *(("round",) if rounds else ()), "p50", "p99", "p99.9", "max", "alerts measured"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for c in cells:
        cell = [c.label, f"{c.rate:,}", *((str(c.round),) if rounds else ())]
        if c.status != "ok":
            table.add_row(*cell, c.status, "", "", "", c.reason[:60])
            continue
        table.add_row(*cell, f"{c.p50_ms:,.0f}", f"{c.p99_ms:,.0f}", f"{c.p999_ms:,.0f}", f"{c.max_ms:,.0f}",
                      f"{c.measured:,}")
    return table


def cell_settings(rates: tuple[int, ...], warmup_s: float | None, measure_s: float | None,
                  quick: bool = False) -> tuple[tuple[int, ...], float, float]:
    """The rates, warm-up and measured seconds of the cells: those given, else the defaults (``QUICK``'s
    with ``quick``).

    >>> cell_settings((), None, None), cell_settings((), None, None, quick=True), cell_settings((500,), 5, None, True)
    (((1000, 10000), 20.0, 60.0), ((1000,), 10.0, 20.0), ((500,), 5, 20.0))
    """
    default_rates, default_warmup, default_measure = QUICK if quick else (RATES, 20.0, 60.0)
    return (rates or default_rates, default_warmup if warmup_s is None else warmup_s,
            default_measure if measure_s is None else measure_s)


def execute_kafka_bench(bootstrap: str, modes: tuple[str, ...], rates: tuple[int, ...], warmup_s: float | None,
                        measure_s: float | None, master: str, out_dir: Path, console: Console,
                        errors: Console, dedups: tuple[str, ...] = (), rounds: int = 1,
                        quick: bool = False) -> list[KafkaCell]:
    """Check the options and the broker, run the cells (each ``rounds`` times), print the table, write
    ``kafka-latency.json``. ``quick``: the defaults of ``QUICK`` where rates and seconds are not given."""
    rates, warmup_s, measure_s = cell_settings(rates, warmup_s, measure_s, quick)
    modes, dedups = modes or KAFKA_MODES, tuple(dict.fromkeys(dedups or ("exact",)))
    if unknown := [d for d in dedups if d not in DEDUPS]:
        raise ConfigError(f"--dedup {unknown[0]!r}: choose {' or '.join(DEDUPS)} (repeat --dedup to measure both)")
    kinds = [parse_trigger(mode).kind for mode in modes]
    if dedups != ("exact",) and "processing" not in kinds:
        raise ConfigError("--dedup applies to micro-batch cells: add a --mode processing:0s (or another processing:T)")
    if any(r <= 0 for r in rates) or warmup_s < 0 or measure_s <= 0:
        raise ConfigError("--rate and --cell-seconds must be above zero and --warmup-seconds not below: "
                          "e.g. --rate 1000 --cell-seconds 60 --warmup-seconds 20")
    if rounds < 1:
        raise ConfigError(f"--rounds {rounds}: measure each cell at least once, e.g. --rounds 3")
    if ":" not in bootstrap or "/" in bootstrap:
        raise ConfigError(f"--kafka {bootstrap}: give the broker as host:port, e.g. --kafka localhost:9092")
    check_brokers([bootstrap], ConfigError)
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="speedlayer-bench-kafka-"))
    log = out_dir / "spark.log"
    errors.print(f"starting Spark ({master}) with Spark's Kafka connector; Spark's log: {log}", soft_wrap=True)
    cells_planned = len(bench_cells(modes, rates, dedups, rounds))
    errors.print(f"bench: fleet alerts on {bootstrap}, {cells_planned} cells of {warmup_s:g} s warm-up + "
                 f"{measure_s:g} s measured (new topics each, removed after)", soft_wrap=True)
    started = time.monotonic()
    try:
        spark = kafka_session(master, log)
        cells = run_kafka_bench(spark, bootstrap, modes, rates, warmup_s, measure_s, str(scratch),
                                lambda cell: errors.print("  " + cell_line(cell), soft_wrap=True, markup=False), dedups,
                                rounds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    console.print(cells_table(cells))
    path = out_dir / KAFKA_JSON
    path.write_text(cells_json(cells, bootstrap=bootstrap, master=master, warmup_s=warmup_s, measure_s=measure_s,
                               rounds=rounds, elapsed_s=round(time.monotonic() - started)))
    console.print(f"wrote {path}", soft_wrap=True)
    return cells
