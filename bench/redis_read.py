"""Read throughput of the Redis Streams source into Spark's noop sink, next to Spark's rate-micro-batch.

    .venv/bin/python bench/redis_read.py                     # 500k entries over 4 shards, 3 rounds
    .venv/bin/python bench/redis_read.py --events 200000 --rounds 1 --redis redis://127.0.0.1:6379/0

One process, one SparkSession (``--master``, default local[*]). First ``speedlayer produce``
publishes ``--events`` generator events round-robin to ``<stream>:0 .. <stream>:<shards-1>`` on
the given Redis (a fresh stream name, deleted at the end); that step is timed too. Then, for
``--rounds`` rounds, alternating:

- ``redis``: the source (trigger availableNow, fresh checkpoint) reads every entry into
  ``format("noop")``, in one batch and with ``maxRecordsPerTrigger`` = ``--per-trigger``;
- ``rate-micro-batch``: Spark's own unpaced source, ``--per-trigger`` rows per batch over
  ``shards`` partitions, the same number of rows into ``noop``.

events/s = events / sum of the batches' ``triggerExecution`` (``batch_rate``) and events / wall
time from ``start()`` to the end (``wall_rate``, includes query start-up), and events per CPU
second (``events_per_cpu_s``: user+system time of this process tree — driver JVM, Python workers,
the source's offset runner — plus the local redis-server). Wall figures move with whatever else
runs on the machine; CPU figures much less (the load average is recorded too). Prints JSON (also
written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_OUT = ROOT / "bench" / "results" / "redis_read.json"


def _tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (the driver JVM, Python daemon and workers, the source runner)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, []))
    return pids


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by ``pid`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class CpuMeter:
    """CPU seconds of this process tree plus the Redis server (when it runs here) over a block."""

    def __init__(self, redis_pid: int | None):
        self.redis_pid = redis_pid

    def __enter__(self) -> CpuMeter:
        self.pids = _tree_pids(os.getpid()) + ([self.redis_pid] if self.redis_pid else [])
        self.before = {pid: cpu_seconds(pid) or 0.0 for pid in self.pids}
        return self

    def __exit__(self, *exc) -> None:
        pids = set(_tree_pids(os.getpid())) | set(self.pids)
        # Workers started during the block count in full; those gone since are left out (their time is
        # lost, few: workers are reused) rather than counted as negative time.
        after = {pid: cpu_seconds(pid) for pid in pids}
        self.seconds = sum(now - self.before.get(pid, 0.0) for pid, now in after.items() if now is not None)


def _run(query, events: int) -> dict:
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    read = sum(p["numInputRows"] for p in batches)
    busy_ms = sum(p["durationMs"]["triggerExecution"] for p in batches)
    return {"events": read, "batches": len(batches), "batch_ms": [p["durationMs"]["triggerExecution"] for p in batches],
            "batch_rate": round(read / busy_ms * 1000) if busy_ms else None, "complete": read == events}


def read_redis(spark, uri: str, events: int, per_trigger: int | None, tmp: Path, meter: CpuMeter) -> dict:
    from speedlayer.sources import open_source

    source = open_source(uri + (f"&maxRecordsPerTrigger={per_trigger}" if per_trigger else ""))
    load = os.getloadavg()[0]
    with meter:
        started = time.perf_counter()
        query = (source.read_stream(spark).writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp / f"ck-{uuid.uuid4().hex[:8]}")).start())
        query.awaitTermination()
        wall = time.perf_counter() - started
    result = _run(query, events)
    return {**result, "wall_s": round(wall, 3), "wall_rate": round(result["events"] / wall),
            "cpu_s": round(meter.seconds, 2), "events_per_cpu_s": round(result["events"] / meter.seconds),
            "load_before": load, "load_after": os.getloadavg()[0]}


def read_rate(spark, events: int, per_trigger: int, partitions: int, tmp: Path, meter: CpuMeter) -> dict:
    load = os.getloadavg()[0]
    with meter:
        started = time.perf_counter()
        stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", per_trigger)
                  .option("numPartitions", partitions).load())
        query = (stream.writeStream.format("noop").trigger(processingTime="0 seconds")
                 .option("checkpointLocation", str(tmp / f"ck-{uuid.uuid4().hex[:8]}")).start())
        while sum(p["numInputRows"] for p in query.recentProgress) < events:
            if query.exception() is not None:
                raise query.exception()
            time.sleep(0.01)
        wall = time.perf_counter() - started
        query.stop()
    result = _run(query, events)
    # keep exactly the batches that make up `events` rows
    kept, total = [], 0
    for ms in result["batch_ms"]:
        if total >= events:
            break
        kept.append(ms)
        total += per_trigger
    rate = round(total / sum(kept) * 1000)
    return {"events": total, "batches": len(kept), "batch_ms": kept, "batch_rate": rate, "wall_s": round(wall, 3),
            "wall_rate": round(total / wall), "cpu_s": round(meter.seconds, 2),
            "events_per_cpu_s": round(total / meter.seconds), "load_before": load, "load_after": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--per-trigger", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fetch-size", type=int, default=10_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    import redis

    from speedlayer.producers.produce import ProduceSettings, plan_produce, produce
    from speedlayer.runtime.session import build_session

    tmp = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    stream = f"bench_{uuid.uuid4().hex[:8]}"
    uri = f"{args.redis}?stream={stream}&shards={args.shards}"
    spark = build_session(args.master, {"spark.ui.enabled": "false"}, app_name="bench-redis-read", log_file=tmp / "spark.log")
    client = redis.Redis.from_url(args.redis)
    report: dict = {"events": args.events, "shards": args.shards, "per_trigger": args.per_trigger,
                    "fetch_size": args.fetch_size, "master": args.master, "cpus": os.cpu_count(), "rounds": []}
    try:
        plan = plan_produce(ProduceSettings(to=uri, generator="generator://?seed=7&start=2026-01-01T00:00:00Z",
                                            rate=0, max_events=args.events, chunk=100_000))
        summary = produce(spark, plan)
        report["produce"] = {"events": summary.events, "seconds": round(summary.elapsed_s, 2),
                             "first_chunk_s": round(summary.startup_s, 2), "rate": round(summary.rate)}
        read_uri = f"{uri}&fetch_size={args.fetch_size}"
        server = client.info("server")
        local = server.get("tcp_port") and args.redis.split("//")[1].split(":")[0] in ("127.0.0.1", "localhost")
        meter = CpuMeter(int(server["process_id"]) if local else None)
        report["redis_cpu_counted"] = bool(local)
        read_redis(spark, read_uri, args.events, None, tmp, meter)  # warm-up: Python workers, JIT
        for _ in range(args.rounds):
            report["rounds"].append({
                "redis_one_batch": read_redis(spark, read_uri, args.events, None, tmp, meter),
                "redis_per_trigger": read_redis(spark, read_uri, args.events, args.per_trigger, tmp, meter),
                "rate_micro_batch": read_rate(spark, args.events, args.per_trigger, args.shards, tmp, meter),
            })
        medians = {}
        for side in ("redis_one_batch", "redis_per_trigger", "rate_micro_batch"):
            medians[side] = {k: statistics.median(r[side][k] for r in report["rounds"])
                             for k in ("batch_rate", "wall_rate", "events_per_cpu_s")}
        medians["redis_vs_rate_batch_rate"] = round(
            medians["redis_per_trigger"]["batch_rate"] / medians["rate_micro_batch"]["batch_rate"], 3)
        report["median_events_per_s"] = medians
    finally:
        for key in client.scan_iter(f"{stream}*"):
            client.delete(key)
        client.close()
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(report, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
