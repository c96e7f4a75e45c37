"""Latency since ingest as a Kafka user measures it: the fleet alerts, Kafka -> Kafka, in every mode,
speedlayer beside plain PySpark written by hand, in one run and one SparkSession; with ``--peers pyflink``
also the same alerts on PyFlink (``bench/peers/flink_alerts.py``, its own process and venv).

For each trigger (continuous, real-time, micro-batch) and rate, both sides run in turn on new topics;
a consumer computes output append time minus input append time (``LogAppendTime`` on both topics,
the one broker's clock), p50/p99/p99.9 over the measured span after a warm-up. The broker is the one
given with ``--bootstrap``, or one started here from the test suite's jars. PyFlink has no trigger: it
runs once per rate, as its own cell of mode "flink-streaming" (record by record, its natural mode).

    .venv/bin/python bench/kafka_latency.py                        # 1,000 and 10,000/s, 60 s measured
    .venv/bin/python bench/kafka_latency.py --quick                # 1,000/s, 20 s measured
    .venv/bin/python bench/kafka_latency.py --bootstrap localhost:9092 --modes continuous:1s
    .venv/bin/python bench/kafka_latency.py --quick --modes continuous:1s --peers pyflink
"""

from __future__ import annotations

import argparse
import shutil
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

from plain_fleet import EVENT_SCHEMA, load_zone_rows, speed_limit  # noqa: E402
from speedlayer.bench.kafka_latency import (  # noqa: E402
    KAFKA_MODES,
    KafkaCell,
    cell_line,
    cells_json,
    kafka_session,
    measure_cell,
    speedlayer_alerts,
    warm_up_session,
)
from speedlayer.runtime.triggers import parse_trigger  # noqa: E402

RESULTS = ROOT / "bench" / "results"
#: the peers ``--peers`` can add: name -> (its mode, its Starter given the bootstrap), each measured once per rate
PEERS = {"pyflink": ("flink-streaming", pyflink_alerts)}


def plain_alerts(spark, bootstrap: str, trigger: str, state_root: str):
    """The same alerts as a PySpark user writes them from the docs: from_json, in micro-batch a watermark
    and dropDuplicatesWithinWatermark, the zone limit as a CASE WHEN, Spark's Kafka sink."""
    kind, every = trigger.partition(":")[0], f"{parse_trigger(trigger).interval_ms} milliseconds"
    zones = load_zone_rows()

    def start(source: str, out: str):
        raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", source).option("startingOffsets", "earliest").load())
        events = raw.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
        if kind == "processing":
            events = events.withWatermark("event_time", "5 seconds").dropDuplicatesWithinWatermark(["event_id"])
        alerts = (events.withColumn("speed_limit_kmh", speed_limit(F.col("lat"), F.col("lon"), zones))
                  .where(F.col("speed_kmh") > F.col("speed_limit_kmh"))
                  .withColumn("excess_kmh", F.round(F.col("speed_kmh") - F.col("speed_limit_kmh"), 1)))
        writer = (alerts.select(F.col("event_id").alias("key"), F.to_json(F.struct(*alerts.columns)).alias("value"))
                  .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
                  .option("checkpointLocation", f"{state_root}/plain-{source}"))
        if kind == "continuous":
            writer = writer.trigger(continuous=every)
        elif kind == "realtime":
            writer = writer.outputMode("update").trigger(realTime=every)
        else:
            writer = writer.trigger(processingTime=every)
        query = writer.start()
        return query.stop
    return start


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
    parser.add_argument("--modes", default=",".join(KAFKA_MODES))
    parser.add_argument("--rates", default="1000,10000")
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--measure", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="1,000/s, 10 s warm-up, 20 s measured")
    parser.add_argument("--peers", default="", help=f"other engines to measure too: {', '.join(PEERS)} (default: none)")
    parser.add_argument("--out", type=Path, default=RESULTS / "kafka_latency.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.rates, args.warmup, args.measure = "1000", 10.0, 20.0
    modes, rates = args.modes.split(","), [int(r) for r in args.rates.split(",")]
    peers = [p for p in args.peers.split(",") if p]
    if unknown := sorted(set(peers) - set(PEERS)):
        parser.error(f"--peers: unknown {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    about_peers = peer_versions(peers)  # makes PyFlink's venv first, so that a failed download ends the run at once

    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from tests.local_servers import Kafka

            broker = stack.enter_context(Kafka())
            bootstrap = broker.bootstrap
        scratch = Path(tempfile.mkdtemp(prefix="speedlayer-kafka-latency-"))
        stack.callback(shutil.rmtree, scratch, True)
        spark = kafka_session("local[2]", scratch / "spark.log")
        started = time.monotonic()
        for start in (speedlayer_alerts(spark, bootstrap, modes[0], str(scratch)),
                      plain_alerts(spark, bootstrap, modes[0], str(scratch))):
            warm_up_session(bootstrap, modes[0], rates[0], start)
        cells: list[KafkaCell] = []
        for rate in rates:
            for mode in modes:
                # the two sides in turn; the order alternates with the mode so neither always goes first
                sides = [("speedlayer", speedlayer_alerts(spark, bootstrap, mode, str(scratch))),
                         ("plain", plain_alerts(spark, bootstrap, mode, str(scratch)))]
                if (modes.index(mode) + rates.index(rate)) % 2:
                    sides.reverse()
                for side, start in sides:
                    cell = measure_cell(bootstrap, side, mode, rate, start, args.warmup, args.measure)
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
                pair = {c.side: c for c in cells if c.mode == mode and c.rate == rate and c.status == "ok"}
                if len(pair) == 2:
                    ratios[f"{mode}@{rate}"] = round(pair["speedlayer"].p99_ms / max(pair["plain"].p99_ms, 1.0), 3)
                    print(f"{mode} {rate:,}/s: speedlayer p99 / plain p99 = {ratios[f'{mode}@{rate}']:.2f}")
        for rate in rates:
            if peers:
                print(p99_line(cells, rate))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(cells_json(cells, command=" ".join(["bench/kafka_latency.py", *(argv or sys.argv[1:])]),
                                       elapsed_s=round(time.monotonic() - started), warmup_s=args.warmup,
                                       measure_s=args.measure, p99_ratios=ratios,
                                       **({"peers": about_peers} if about_peers else {})))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
