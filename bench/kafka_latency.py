"""Latency since ingest as a Kafka user measures it: the fleet alerts, Kafka -> Kafka, in every mode,
speedlayer beside plain PySpark written by hand, in one run and one SparkSession; with ``--peers pyflink``
also the same alerts on PyFlink (``bench/peers/flink_alerts.py``, its own process and venv).

For each trigger (continuous, real-time, micro-batch) and rate, both sides run in turn on new topics;
a consumer computes output append time minus input append time (``LogAppendTime`` on both topics,
the one broker's clock), p50/p99/p99.9 over the measured span after a warm-up. The broker is the one
given with ``--bootstrap``, or one started here from the test suite's jars. PyFlink has no trigger: it
runs once per rate, as its own cell of mode "flink-streaming" (record by record, its natural mode).
``--job make-run`` measures ``make run``'s job instead (windows and alerts, a query each, micro-batches
at 5,000 pings/s; the alerts' latency), speedlayer's against ``plain_fleet``'s written by hand.

    .venv/bin/python bench/kafka_latency.py                        # 1,000 and 10,000/s, 60 s measured
    .venv/bin/python bench/kafka_latency.py --quick                # 1,000/s, 20 s measured
    .venv/bin/python bench/kafka_latency.py --bootstrap localhost:9092 --modes continuous:1s
    .venv/bin/python bench/kafka_latency.py --quick --modes continuous:1s --peers pyflink
    .venv/bin/python bench/kafka_latency.py --job make-run          # 5,000/s, micro-batch
    .venv/bin/python bench/kafka_latency.py --modes continuous:1s,processing:0s --rates 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "peers"))

from flink_alerts import pyflink_alerts  # noqa: E402
from flink_env import CONNECTOR_VERSION, FLINK_VERSION, ensure_pyflink  # noqa: E402

import plain_fleet  # noqa: E402
from plain_fleet import EVENT_SCHEMA, PlainSettings, load_zone_rows, speed_limit  # noqa: E402
from speedlayer.bench.kafka_command import DEDUPS  # noqa: E402
from speedlayer.bench.kafka_latency import (  # noqa: E402
    KAFKA_MODES,
    KafkaCell,
    cell_line,
    cells_json,
    create_topics,
    delete_topics,
    kafka_session,
    measure_cell,
    speedlayer_alerts,
    warm_up_session,
    windows_topic,
)
from speedlayer.decode.observation import observe_latency  # noqa: E402
from speedlayer.runtime.triggers import parse_trigger  # noqa: E402

RESULTS = ROOT / "bench" / "results"
#: the peers ``--peers`` can add: name -> (its mode, its Starter given the bootstrap), each measured once per rate
PEERS = {"pyflink": ("flink-streaming", pyflink_alerts)}


def broker_and_session(stack: ExitStack, bootstrap: str | None, prefix: str):
    """(bootstrap, scratch directory, session): the broker given, or one started from the test suite's jars,
    a scratch directory and a session with Spark's Kafka connector, all closed with ``stack``."""
    if bootstrap is None:
        from tests.local_servers import Kafka

        bootstrap = stack.enter_context(Kafka()).bootstrap
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    stack.callback(shutil.rmtree, scratch, True)
    return bootstrap, scratch, kafka_session("local[2]", scratch / "spark.log")


def kafka_raw(spark, bootstrap: str, source: str):
    """The input topic as ``plain_fleet`` reads its RAW rows: value, key, offset, ingest_time."""
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source).option("startingOffsets", "earliest").load()
            .select(F.col("value").cast("string").alias("value"), F.col("key").cast("string").alias("key"),
                    "offset", F.col("timestamp").alias("ingest_time")))


def start_kafka_query(frame, key: str, bootstrap: str, topic: str, checkpoint: str, trigger: str):
    """``frame`` written by Spark's Kafka sink into ``topic`` (``key`` the record's key, every column as
    JSON its value) under ``trigger`` (speedlayer's spelling: continuous:, realtime:, processing:)."""
    kind, every = trigger.partition(":")[0], f"{parse_trigger(trigger).interval_ms} milliseconds"
    writer = (frame.select(F.col(key).alias("key"), F.to_json(F.struct(*frame.columns)).alias("value"))
              .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("checkpointLocation", checkpoint))
    if kind == "continuous":
        return writer.trigger(continuous=every).start()
    if kind == "realtime":
        return writer.outputMode("update").trigger(realTime=every).start()
    return writer.trigger(processingTime=every).start()


def plain_alerts(spark, bootstrap: str, trigger: str, state_root: str, checks: bool = False, observed: bool = False):
    """The same alerts as a PySpark user writes them from the docs: from_json, in micro-batch a watermark
    and dropDuplicatesWithinWatermark, the zone limit as a CASE WHEN, Spark's Kafka sink. With ``checks``,
    only the events whose every field is present and in range (``plain_fleet.accepted``), as speedlayer's
    decode accepts them; with ``observed`` too, speedlayer's per-batch observation (``observe_latency``)
    attached to the parsed rows, as decode attaches it to its own."""
    kind = trigger.partition(":")[0]
    zones = load_zone_rows()

    def start(source: str, out: str):
        raw = kafka_raw(spark, bootstrap, source)
        if checks:
            parsed = plain_fleet.parsed(raw)
            if observed:
                parsed = observe_latency(parsed, "plain_observation", F.col("ok"), F.col("e.event_time"),
                                         F.col("ingest_time")).select(*parsed.columns)
            events = parsed.where(plain_fleet.accepted(PlainSettings())).select("e.*")
        else:
            events = raw.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
        if kind == "processing":
            events = events.withWatermark("event_time", "5 seconds").dropDuplicatesWithinWatermark(["event_id"])
        alerts = (events.withColumn("speed_limit_kmh", speed_limit(F.col("lat"), F.col("lon"), zones))
                  .where(F.col("speed_kmh") > F.col("speed_limit_kmh"))
                  .withColumn("excess_kmh", F.round(F.col("speed_kmh") - F.col("speed_limit_kmh"), 1)))
        return start_kafka_query(alerts, "event_id", bootstrap, out, f"{state_root}/plain-{source}", trigger).stop
    return start


def plain_make_run(spark, bootstrap: str, trigger: str, state_root: str):
    """``make run``'s job as a PySpark user writes it by hand (``plain_fleet``: validity checks, a 5 s
    watermark, ``dropDuplicatesWithinWatermark``, the zone limit as a CASE WHEN), over Kafka: windows and
    alerts, each a query, micro-batches, each into its topic through Spark's Kafka sink."""

    def start(source: str, out: str):
        raw = kafka_raw(spark, bootstrap, source)
        create_topics(bootstrap, {windows_topic(out): 1})
        queries = [start_kafka_query(plain_fleet.BUILDERS[name](raw, PlainSettings()), key, bootstrap, topic,
                                     f"{state_root}/plain-{name}-{source}", trigger)
                   for name, topic, key in (("windows", windows_topic(out), "vehicle_id"), ("alerts", out, "event_id"))]

        def stop() -> None:
            for query in queries:
                query.stop()
            delete_topics(bootstrap, [windows_topic(out)])
        return stop
    return start


#: the jobs ``--job`` measures: name -> what it is
JOBS = {"alerts": "the fleet alerts alone",
        "make-run": "make run's job: windows and alerts, a query each, micro-batch only"}


def starters(spark, bootstrap: str, mode: str, state_root: str, args) -> list[tuple[str, object]]:
    """The two sides of a cell: speedlayer's run of ``args.job`` and plain PySpark's."""
    make_run = args.job == "make-run"
    plain = (plain_make_run(spark, bootstrap, mode, state_root) if make_run
             else plain_alerts(spark, bootstrap, mode, state_root, checks=args.plain_checks))
    return [("speedlayer", speedlayer_alerts(spark, bootstrap, mode, state_root, windows=make_run, dedup=args.dedup)),
            ("plain", plain)]


def peer_versions(peers: list[str]) -> dict[str, dict[str, str]]:
    """What each peer runs on; makes PyFlink's venv (on first use) on the way."""
    if "pyflink" not in peers:
        return {}
    ensure_pyflink()
    return {"pyflink": {"apache-flink": FLINK_VERSION, "flink-sql-connector-kafka": CONNECTOR_VERSION}}


def p99_line(cells: list[KafkaCell], rate: int) -> str:
    """Every side's p99 at ``rate`` in one line, peers first."""
    parts = [f"{c.side} {c.mode} {c.p99_ms:,.0f} ms" if c.status == "ok" else f"{c.side} {c.mode} {c.status}"
             for c in sorted((c for c in cells if c.rate == rate), key=lambda c: c.side not in PEERS)]
    return f"{rate:,}/s p99: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="a broker to use (default: start one from the test suite's jars)")
    parser.add_argument("--job", choices=sorted(JOBS), default="alerts",
                        help="; ".join(f"{name}: {about}" for name, about in JOBS.items()))
    parser.add_argument("--dedup", choices=DEDUPS, default="exact", help="speedlayer's --dedup")
    parser.add_argument("--plain-checks", action="store_true",
                        help="the plain alerts keep only events whose fields are present and in range, as speedlayer's do")
    parser.add_argument("--modes", help=f"default: {','.join(KAFKA_MODES)}; processing:0s for --job make-run")
    parser.add_argument("--rates", help="default: 1000,10000; 5000 (make run's rate) for --job make-run")
    parser.add_argument("--warmup", type=float,
                        help="seconds each cell runs before it is measured (default 20; 60 for --job make-run, whose "
                             "generated code the JVM takes over a minute to compile)")
    parser.add_argument("--measure", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every cell this many times, the sides' order alternating; ratios compare "
                             "the sides' median p99 (default 1)")
    parser.add_argument("--quick", action="store_true", help="1,000/s, 10 s warm-up, 20 s measured")
    parser.add_argument("--peers", default="", help=f"other engines to measure too: {', '.join(PEERS)} (default: none)")
    parser.add_argument("--out", type=Path, help="default: bench/results/kafka_latency.json, kafka_latency_make_run.json "
                        "for --job make-run")
    args = parser.parse_args(argv)
    make_run = args.job == "make-run"
    args.modes = args.modes or ("processing:0s" if make_run else ",".join(KAFKA_MODES))
    args.rates = args.rates or ("5000" if make_run else "1000,10000")
    args.warmup = args.warmup if args.warmup is not None else (60.0 if make_run else 20.0)
    args.out = args.out or RESULTS / ("kafka_latency_make_run.json" if make_run else "kafka_latency.json")
    if args.quick:
        args.rates, args.warmup, args.measure = "1000", 10.0, 20.0
    modes, rates = args.modes.split(","), [int(r) for r in args.rates.split(",")]
    peers = [p for p in args.peers.split(",") if p]
    if unknown := sorted(set(peers) - set(PEERS)):
        parser.error(f"--peers: unknown {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    if peers and make_run:
        parser.error("--peers measure the alerts alone: drop --peers, or use --job alerts")
    about_peers = peer_versions(peers)  # makes PyFlink's venv first, so that a failed download ends the run at once

    with ExitStack() as stack:
        bootstrap, scratch, spark = broker_and_session(stack, args.bootstrap, "speedlayer-kafka-latency-")
        started = time.monotonic()
        for _, start in starters(spark, bootstrap, modes[0], str(scratch), args):
            warm_up_session(bootstrap, modes[0], rates[0], start)
        cells: list[KafkaCell] = []
        for rate in rates:
            for mode in modes:
                for round_ in range(1, args.rounds + 1):
                    # the two sides in turn; the order alternates with mode and round so neither always goes first
                    sides = starters(spark, bootstrap, mode, str(scratch), args)
                    if (modes.index(mode) + rates.index(rate) + round_ - 1) % 2:
                        sides.reverse()
                    for side, start in sides:
                        dedup = args.dedup if side == "speedlayer" and parse_trigger(mode).kind == "processing" else None
                        cell = measure_cell(bootstrap, side, mode, rate, start, args.warmup, args.measure, dedup=dedup)
                        cell.round = round_
                        cells.append(cell)
                        print(cell_line(cell), flush=True)
            for peer in peers:
                mode, starter = PEERS[peer]
                cell = measure_cell(bootstrap, peer, mode, rate, starter(bootstrap), args.warmup, args.measure)
                cells.append(cell)
                print(cell_line(cell), flush=True)
        ratios = {}
        for rate in rates:
            for mode in modes:
                p99s = {side: [c.p99_ms for c in cells if (c.side, c.mode, c.rate, c.status) == (side, mode, rate, "ok")]
                        for side in ("speedlayer", "plain")}
                if all(p99s.values()):
                    ours, plain = (statistics.median(p99s[side]) for side in ("speedlayer", "plain"))
                    ratios[f"{mode}@{rate}"] = round(ours / max(plain, 1.0), 3)
                    print(f"{mode} {rate:,}/s: speedlayer p99 / plain p99 = {ratios[f'{mode}@{rate}']:.2f}"
                          + (f" (medians of {args.rounds} rounds: {ours:,.0f} / {plain:,.0f} ms)" if args.rounds > 1 else ""))
        for rate in rates:
            if peers:
                print(p99_line(cells, rate))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(cells_json(cells, command=" ".join(["bench/kafka_latency.py", *(argv or sys.argv[1:])]),
                                       elapsed_s=round(time.monotonic() - started), warmup_s=args.warmup,
                                       measure_s=args.measure, rounds=args.rounds, p99_ratios=ratios,
                                       **({"peers": about_peers} if about_peers else {})))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
