"""What ``speedlayer bench`` and ``speedlayer advise`` do once their options are valid."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from speedlayer.bench.advice import fit_batch_cost, recommend
from speedlayer.bench.kafka_advice import KafkaAdvice, is_kafka_results, kafka_advice
from speedlayer.bench.lab import LabConfig, batch_points, run_lab
from speedlayer.bench.report import advice_table, cells_table, sustained_table, write_report
from speedlayer.bench.watch import LatencySink
from speedlayer.core.errors import ConfigError, SpeedlayerError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.session import build_session
from speedlayer.runtime.settings import RunSettings

BENCH_DRIVER_MEMORY = "8g"


def _session(master: str, log_file: Path):
    # A cell fed faster than its query drains keeps the backlog in the socket source's buffer on
    # the driver heap (Spark drops lines only when a batch commits): the default 2 GB ran out at 50,000/s.
    return build_session(master, {"spark.ui.enabled": "false", "spark.driver.memory": BENCH_DRIVER_MEMORY},
                         app_name="speedlayer-bench", log_file=log_file)


def execute_bench(cfg: LabConfig, out_dir: Path, console: Console, errors: Console) -> dict[str, Any]:
    """Run the lab, print its tables, write bench.json and the plots into ``out_dir``."""
    cfg.check()
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "spark.log"
    errors.print(f"starting Spark ({cfg.master}); Spark's log: {log}", soft_wrap=True)
    spark = _session(cfg.master, log)
    cells = len(cfg.outputs) * len(cfg.modes) * len(cfg.rates)
    errors.print(f"bench: {cells} cells ({', '.join(cfg.outputs)} x {len(cfg.modes)} triggers x rates "
                 f"{', '.join(f'{r:,}' for r in cfg.rates)}/s), {cfg.cell_s:g}s each", soft_wrap=True)

    def progress(cell) -> None:
        what = (f"p50 {cell.p50_ms} ms, p99 {cell.p99_ms} ms, kept up: {cell.kept_up}" if cell.status == "ok"
                else f"{cell.status}: {cell.reason}")
        errors.print(f"  {cell.output} {cell.mode} {cell.rate:,}/s: {what} ({cell.wall_s:g}s)", soft_wrap=True, markup=False)

    results = run_lab(spark, cfg, on_cell=progress)
    paths = write_report(results, out_dir)
    console.print(cells_table(results, title=f"latency lab ({results['elapsed_s']:.0f}s)"))
    console.print(sustained_table(results))
    if results["batch_cost"]:
        c = results["batch_cost"]
        console.print(f"time per batch ~ {c['fixed_ms']:,.0f} ms + {c['per_event_us']:.2f} µs x events "
                      f"({c['points']} batches); 'speedlayer advise --from {paths['json']}' turns it into a trigger")
    console.print(f"wrote {paths['json']}, {paths['latency_plot']}, {paths['batch_plot']}", soft_wrap=True)
    return results


def measure_batch_cost(spark, output: str, sizes: list[int], batches: int, window: str, watermark: str,
                       master: str) -> list[tuple[int, int]]:
    """(events, triggerExecution ms) of ``batches`` micro-batches per size, after one warm-up batch.

    The generator's unpaced ``rows_per_batch`` gives batches of exactly that size, back to back.
    """
    tmp = Path(tempfile.mkdtemp(prefix="speedlayer-advise-"))
    points: list[tuple[int, int]] = []
    try:
        for i, size in enumerate(sizes):
            uri = (f"generator://?seed=7&rows_per_batch={size}&rate={size}&late=0&malformed=0&duplicates=0.01"
                   "&start=2026-01-01T00:00:00Z")
            settings = RunSettings(job="fleet", source=uri, trigger="processing:0s", window=window, watermark=watermark,
                                   state_dir=str(tmp / f"s{i}"), master=master)
            run = Run(spark, plan_run(settings, sinks={output: LatencySink(f"advise_{i}", output, 0)}))
            run.start()
            query = run.queries[0]
            deadline = time.monotonic() + 600
            while (query.lastProgress is None or query.lastProgress["batchId"] < batches) and time.monotonic() < deadline:
                if not query.isActive:
                    raise SpeedlayerError(f"the measurement query stopped: {query.exception()}")
                time.sleep(0.1)
            progress = [p for p in query.recentProgress if p.batchId >= 1]  # batch 0 compiles and warms up
            run.stop_requested.set()
            run.wait()
            run.cleanup()
            points += [(int(p.numInputRows), int(p.durationMs["triggerExecution"])) for p in progress[:batches]
                       if p.numInputRows]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return points


def kafka_mode_advice(results: dict, rate: int, latency_ms: int | None, output: str, path: Path,
                      console: Console) -> KafkaAdvice:
    """Print the mode that meets ``latency_ms`` at ``rate`` by the Kafka cells of ``results``, and every mode's verdict."""
    try:
        advice = kafka_advice(results["cells"], rate, latency_ms, stateful=(output == "windows"))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}: give the kafka-latency.json that 'speedlayer bench --kafka' wrote") from None
    target = f"a p99 of at most {latency_ms:,} ms" if latency_ms is not None else "no latency target"
    measured = f"as a Kafka consumer measured the fleet alerts ({path})"
    if advice.recommended is None:
        console.print(f"no measured mode meets {target} at {rate:,} events/s {measured}: relax the target, add "
                      "cores, or measure the modes at this rate with speedlayer bench --kafka", soft_wrap=True)
    else:
        cost = f"; it gives up {advice.gives_up}" if advice.gives_up else "; it keeps exactly-once and every operation"
        console.print(f"for {rate:,} events/s and {target}: --trigger {advice.recommended}, {measured}{cost}",
                      soft_wrap=True)
    console.print(advice_table(advice))
    return advice


def _not_ours(path: Path) -> ConfigError:
    return ConfigError(f"{path} is not a bench.json or kafka-latency.json written by 'speedlayer bench'")


def _results_file(path: Path) -> Any:
    """The JSON of a results file ``--from`` names, or a one-line error saying which file to give."""
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: give the bench.json or kafka-latency.json that "
                          "'speedlayer bench --out DIR' wrote into DIR (bench-out by default)")
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise _not_ours(path) from None


def execute_advise(rate: int, latency_ms: int | None, output: str | None, headroom: float, from_json: Path | None,
                   sizes: list[int], batches: int, window: str, watermark: str, master: str, out_dir: Path | None,
                   console: Console, errors: Console):
    """Fit the batch cost (from a bench.json, or a short measurement) and print the recommendation. ``output``
    None: the alerts for a kafka-latency.json (what it measures), else the windows."""
    results = _results_file(from_json) if from_json is not None else None
    if isinstance(results, dict) and is_kafka_results(results):
        return kafka_mode_advice(results, rate, latency_ms, output or "alerts", from_json, console)
    output = output or "windows"
    if from_json is not None:
        try:
            points = batch_points(results, output) or batch_points(results)
        except (KeyError, TypeError):
            raise _not_ours(from_json) from None
        source = f"{len(points)} micro-batches in {from_json}"
    else:
        log = Path(tempfile.gettempdir()) / "speedlayer-advise-spark.log"
        errors.print(f"measuring time per batch of fleet {output} at {', '.join(f'{s:,}' for s in sizes)} events per batch "
                     f"({batches} batches each); Spark's log: {log}", soft_wrap=True)
        spark = _session(master, log)
        points = measure_batch_cost(spark, output, sizes, batches, window, watermark, master)
        source = f"{len(points)} micro-batches measured now"
    try:
        cost = fit_batch_cost(points)
    except ValueError:
        raise ConfigError("not enough micro-batches of different sizes to fit a batch cost: "
                          "run 'speedlayer advise' without --from, or a longer bench") from None
    advice = recommend(cost, rate, latency_ms, headroom, stateful=(output == "windows"))
    fit_line = f"time per batch ~ {cost.fixed_ms:,.0f} ms + {cost.per_event_us:.2f} µs x events ({source}"
    console.print(fit_line + (f", r² {cost.r2:.2f})" if cost.r2 is not None else ")"), soft_wrap=True)
    if advice.problem:
        console.print(f"no micro-batch interval keeps up: {advice.problem}", soft_wrap=True)
    else:
        if cost.per_event_us == 0:
            errors.print("note: the fitted cost per event is zero (bigger batches were not slower): the measurement "
                         "is too noisy, e.g. on a loaded machine; measure again with sizes further apart",
                         soft_wrap=True)
        cap = (f"maxRecordsPerTrigger={advice.max_records_per_trigger:,}" if advice.max_records_per_trigger
               else "no maxRecordsPerTrigger (no per-event cost to bound a batch by)")
        console.print(
            f"for {rate:,} events/s with {headroom:.0%} headroom: --trigger {advice.trigger} and "
            f"{cap} (a batch of {advice.batch_events:,} events takes "
            f"~{advice.batch_ms:,.0f} ms of its {advice.interval_ms:,} ms; "
            f"worst-case latency ~{advice.worst_latency_ms:,.0f} ms); "
            + (f"capacity at this headroom ~{advice.capacity_rate:,.0f} events/s" if math.isfinite(advice.capacity_rate)
               else "capacity unknown"), soft_wrap=True)
    console.print(advice_table(advice))
    if out_dir is not None:
        from speedlayer.bench.report import BATCH_PLOT, plot_batches

        out_dir.mkdir(parents=True, exist_ok=True)
        plot = plot_batches(points, cost, out_dir / BATCH_PLOT)
        console.print(f"wrote {plot}")
    return advice


