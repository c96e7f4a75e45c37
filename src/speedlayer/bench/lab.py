"""The latency lab: the fleet outputs under every trigger at a series of input rates.

Each cell (output, trigger, rate) is one query planned and started through the runner (``plan_run`` / ``Run``)
in one shared SparkSession: a ``Feed`` writes stamped events at the rate (a socket for
micro-batch and continuous, a landing directory for available-now, which a scheduler re-runs
every ``schedule_s``), the output goes to a ``LatencySink`` and a ``SinkWatcher`` stamps every
row when it becomes visible. A trigger the output cannot run in is reported "not supported"
with the runner's own reason (its one-line ConfigError), and the lab goes on.

    >>> result = run_lab(spark, LabConfig.quick(), Path("out/bench"))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from speedlayer.bench.advice import fit_batch_cost
from speedlayer.bench.cell import NOT_SUPPORTED, OK, Cell, CellMeasurement, CellTiming, Cpu
from speedlayer.bench.feed import Template
from speedlayer.bench.watch import LatencyParquetSink, LatencySink
from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import RunPlan, plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.runtime.triggers import parse_trigger

MODES = ("processing:0s", "processing:100ms", "processing:1s", "processing:5s", "available-now", "continuous:1s",
         "realtime:")
OUTPUTS = ("windows", "alerts")


@dataclass(frozen=True)
class LabConfig:
    outputs: tuple[str, ...] = OUTPUTS
    modes: tuple[str, ...] = MODES
    rates: tuple[int, ...] = (1_000, 10_000, 50_000, 100_000)
    cell_s: float = 30.0
    warmup_s: float = 5.0
    window: str = "10s"
    watermark: str = "5s"
    vehicles: int = 200
    templates: int = 20_000
    #: available-now: a scheduler starts a run every this many seconds
    schedule_s: float = 10.0
    poll_ms: float = 5.0
    master: str = "local[2]"

    @classmethod
    def quick(cls) -> LabConfig:
        """Every trigger and both outputs at one small rate, 3 s cells and 2 s windows (2 min 30 s on 2 idle cores).

        Two rates took 4 min 22 s on a quiet machine: the windows cells wait for their last window
        to close, which costs the same at any rate, so a second rate doubles the time and adds
        little to a smoke run.
        """
        return cls(rates=(2_000,), cell_s=3.0, warmup_s=0.5, window="2s", watermark="1s",
                   templates=4_000, schedule_s=1.5)

    def check(self) -> None:
        for output in self.outputs:
            if output not in OUTPUTS:
                raise ConfigError(f"the bench measures the outputs {', '.join(OUTPUTS)}, not {output!r}")
        for mode in self.modes:
            parse_trigger(mode)
            if mode.split(":")[0] == "once":
                raise ConfigError("the bench runs available-now for scheduled batches, not once: drop --mode once")
        if not self.rates or min(self.rates) <= 0:
            raise ConfigError("--rate must be above zero events/s")
        if self.warmup_s >= self.cell_s:
            raise ConfigError(f"the warm-up ({self.warmup_s:g}s) must be shorter than a cell ({self.cell_s:g}s)")
        parse_duration(self.window, "--window")
        parse_duration(self.watermark, "--watermark")



    def timing(self) -> CellTiming:
        return CellTiming(self.cell_s, self.warmup_s, self.schedule_s, self.poll_ms)


def _plan(cfg: LabConfig, output: str, mode: str, source: str, state_dir: Path, table: str) -> RunPlan:
    """A run of one output into a latency sink, planned and checked as any run: memory, or Parquet
    under ``state_dir`` for available-now (its scheduled runs resume from the checkpoint, which the
    memory sink cannot)."""
    settings = RunSettings(job="fleet", source=source, trigger=mode, window=cfg.window, watermark=cfg.watermark,
                           state_dir=str(state_dir), master=cfg.master)
    watermark_ms = parse_duration(cfg.watermark)
    if parse_trigger(mode).kind == "available-now":
        sink = LatencyParquetSink(state_dir / "out", output, watermark_ms)
    else:
        sink = LatencySink(table, output, watermark_ms)
    return plan_run(settings, sinks={output: sink})


def support(cfg: LabConfig, output: str, mode: str, tmp: Path) -> str | None:
    """None when the runner accepts this output under this trigger, else its one-line reason."""
    source = "socket://127.0.0.1:9" if parse_trigger(mode).kind != "available-now" else f"files://{tmp}"
    try:
        _plan(cfg, output, mode, source, tmp / "unused", "bench_probe")
    except ConfigError as exc:
        return str(exc)
    return None


def _start(spark, cfg: LabConfig, output: str, mode: str, uri: str, state_dir: Path, table: str) -> Run:
    """A prepared run of one output into its latency sink (``start()`` starts it)."""
    run = Run(spark, _plan(cfg, output, mode, uri, state_dir, table))
    run.prepare()
    return run


def run_cell(spark, cfg: LabConfig, templates: list[Template], output: str, mode: str, rate: int, tmp: Path,
             cpu: Cpu, index: int) -> Cell:
    """Measure one (output, trigger, rate) cell; a cell whose query fails is reported, not raised."""
    reason = support(cfg, output, mode, tmp)
    if reason is not None:
        return Cell(output, mode, rate, status=NOT_SUPPORTED, reason=reason)

    def start(uri: str, state_dir: Path, name: str) -> Run:
        return _start(spark, cfg, output, mode, uri, state_dir, name)

    return CellMeasurement(Cell(output, mode, rate), cfg.timing(), parse_trigger(mode), templates, tmp / f"cell-{index}",
                           tmp / f"landing-{index}", f"bench_{index}", cpu, start).run()


def sustained(cells: list[Cell]) -> dict[str, dict[str, Any]]:
    """Per output and trigger: the highest rate kept up with (None if none), and its p99."""
    out: dict[str, dict[str, Any]] = {}
    for c in cells:
        entry = out.setdefault(c.output, {}).setdefault(c.mode, {"rate": None, "p99_ms": None, "status": c.status,
                                                                 "reason": c.reason})
        if c.status == OK and c.kept_up and (entry["rate"] is None or c.rate > entry["rate"]):
            entry.update(rate=c.rate, p99_ms=c.p99_ms, status=OK)
        elif c.status == OK and entry["status"] != OK:
            entry["status"] = OK
    return out


def run_lab(spark, cfg: LabConfig, on_cell: Callable[[Cell], None] | None = None) -> dict[str, Any]:
    """Run every cell of ``cfg`` and return the results (what ``bench.json`` holds)."""
    import platform

    import pyspark

    from speedlayer.bench.feed import templates_from_generator

    cfg.check()
    tmp = Path(tempfile.mkdtemp(prefix="speedlayer-bench-"))
    t0 = time.time()
    cells: list[Cell] = []
    try:
        templates = templates_from_generator(spark, cfg.templates, cfg.vehicles)
        cpu = Cpu(spark)
        index = 0
        for output in cfg.outputs:
            for mode in cfg.modes:
                for rate in cfg.rates:
                    index += 1
                    cell = run_cell(spark, cfg, templates, output, mode, rate, tmp, cpu, index)
                    cells.append(cell)
                    if on_cell:
                        on_cell(cell)
                    if cell.status == NOT_SUPPORTED:
                        for other in cfg.rates[cfg.rates.index(rate) + 1:]:  # same reason at every rate
                            cells.append(replace(cell, rate=other))
                        break
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    points = [tuple(b) for c in cells for b in c.batches]
    try:
        fit = asdict(fit_batch_cost(points))
    except ValueError:
        fit = None
    return {
        "benchmark": "latency_lab",
        "config": asdict(cfg),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "pyspark": pyspark.__version__,
                    "load_average_at_start": list(os.getloadavg())},
        "elapsed_s": round(time.time() - t0, 1),
        "cells": [asdict(c) for c in cells],
        "sustained": sustained(cells),
        "batch_cost": fit,
    }


def batch_points(results: dict[str, Any], output: str | None = None) -> list[tuple[int, int]]:
    """(input rows, ms) of every measured micro-batch in a results dict, optionally of one output."""
    return [tuple(b) for c in results["cells"] if output in (None, c["output"]) for b in c["batches"]]

