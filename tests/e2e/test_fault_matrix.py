"""The fault matrix: SIGKILL at each phase of a micro-batch, from Kafka into every kind of sink at once, checked
by a plain oracle.

The fleet job reads a topic that ``speedlayer produce`` filled (keyed by vehicle over two partitions) and
writes six outputs to six kinds of sink: ``windows`` to PostgreSQL, ``trips`` to MariaDB, ``alerts`` to a
Kafka topic (exactly once, by transactions), ``dead-letters`` to a Redis stream, ``sliding`` to Redis
hashes (latest window per vehicle), ``congestion`` to a Delta table (Delta's txnAppId/txnVersion). The
run is held at a named phase of one micro-batch by ``speedlayer.core.faults`` (every sink stops there
and leaves a marker), the test sees every marker and the checkpoint showing that batch planned and not
committed, then kills the whole process group and restarts the same command at the next phase:

planned (nothing written) -> mid-write (part of the batch written) -> partition-written (state
store versions committed) -> written (every row written, the commit log not yet).

Every run reads with ``--trigger available-now`` (``PER_TRIGGER`` records a batch), so the last one
ends by itself at the end of the topic. What the sinks then hold (the alerts topic read with
``isolation.level=read_committed``, the Delta table through its log) is compared with ``tests.oracle``:
results computed in plain Python from the records read back from the input topic, without Spark or the
job's code. No row missing, none twice, every value right.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from speedlayer.core.faults import DIR_ENV, ENV
from speedlayer.producers.produce import ProduceSettings, plan_produce, produce
from tests import oracle, servers
from tests.e2e.checks import check_congestion, check_dead_letters, check_sliding, check_windows, final_watermark
from tests.e2e.killing import CliProcess, batch_ids, mysql_rows, our_tracebacks, query_state, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

#: records in the topic (40 s of event time, 100 vehicles) and per micro-batch: five batches, the last one held
N, PER_TRIGGER = 8_000, 1_600
GENERATOR = "generator://?seed=23&late=0&rate=200&vehicles=100&malformed=0.01"
#: trips short enough to close within the topic's 40 s of event time
TRIP_GAP, MAX_TRIP = timedelta(seconds=5), timedelta(seconds=10)
#: the phase each run is held at, and in which batch of each query (every query has rows to write from
#: batch 1 on: the watermark, 5 s behind the newest event, closes windows of the batch before)
PHASES = [("planned", 1), ("mid-write", 2), ("partition-written", 3), ("written", 4)]
#: the phases each sink passes (a Delta append is one step: no partition is written apart)
PASSES = {"Delta_table": ("planned", "written")}
HELD_WITHIN_S, FINAL_RUN_S = 900, 900
#: a stateful query's partitions (each with its state store): more than one, so a batch is written in parts
SHUFFLE_PARTITIONS = 2


def hold_and_kill(args: list[str], workdir: Path, phase: str, batch: int, hooked: dict[str, str],
                  monkeypatch) -> None:
    """Run until every hooked sink holds at ``phase`` of ``batch``; check the checkpoints; SIGKILL."""
    markers = workdir / "markers" / phase
    monkeypatch.setenv(ENV, f"{phase}:{batch}")
    monkeypatch.setenv(DIR_ENV, str(markers))
    process = CliProcess(args, workdir, workdir / f"{phase}.log")
    held_here = {output: sink for output, sink in hooked.items() if phase in PASSES.get(sink, (phase,))}

    def all_held() -> bool:
        names = [m.name for m in markers.iterdir()] if markers.is_dir() else []
        return all(any(n.startswith(f"{phase}-{batch}-{sink}") for n in names) for sink in held_here.values())

    wait_for(all_held, process, HELD_WITHIN_S, f"every sink held at {phase} of batch {batch}")
    process.kill()
    checkpoints = workdir / "state" / "checkpoints"
    for output in held_here:  # planned, not committed: the moment claimed (a sink not held here died wherever it was)
        assert query_state(checkpoints / output).in_flight == batch, (phase, output, query_state(checkpoints / output))
    # the stateful query's state store: no version of the batch before anything ran, one once a partition's
    # rows are all written (mid-write: either, as Spark's feeder thread may run ahead of the Python writer)
    versions = {p.name.split(".")[0] for p in (checkpoints / "sliding" / "state").rglob("*") if p.is_file()}
    if phase != "mid-write":
        assert (str(batch + 1) in versions) == (phase != "planned"), (phase, sorted(versions))
    monkeypatch.delenv(ENV)


def connector_jars(spark) -> str:
    """The jars the test's session fetched for Kafka and Delta (``spark.jars.packages`` ends in ``spark.jars``)."""
    jars = spark.sparkContext.getConf().get("spark.jars", "")
    assert "spark-sql-kafka-0-10" in jars and "delta-spark" in jars, jars
    return jars


def check_trips(mysql_url: str, pings, closed_by: datetime) -> None:
    columns = ["vehicle_id", "trip_start", "trip_end", "pings", "distance_km", "max_speed_kmh"]
    rows = mysql_rows(mysql_url, "trips", columns)
    got = {(r[0], r[1]): r[2:] for r in rows}
    expected = oracle.trips(pings, TRIP_GAP, MAX_TRIP, closed_by)
    assert len(rows) == len(got), "a trip written twice"
    assert set(got) == set(expected) and len(expected) > 200, (len(got), len(expected))
    for key, want in expected.items():
        end, count, distance, top = got[key]
        assert (end, count, top) == (want["trip_end"], want["pings"], want["max_speed_kmh"]), key
        assert distance == pytest.approx(want["distance_km"], rel=1e-9, abs=1e-12), key


def test_sigkill_at_every_phase_loses_and_repeats_nothing_in_any_sink(spark, kafka, postgres_url, mysql_url, redis_url,
                                                                      tmp_path, monkeypatch):
    source, alerts = kafka.create(prefix="fastcars"), kafka.create(prefix="alerts")
    start = (datetime.now(timezone.utc) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:00Z")
    # what `speedlayer produce` does, in the test's session (the CLI's own Kafka run: tests/producers)
    plan = plan_produce(ProduceSettings(to=f"kafka://{kafka.bootstrap}/{source}", generator=GENERATOR, rate=0,
                                        max_events=N, start=start))
    plan.destination.check()
    assert produce(spark, plan).events == N
    inputs = kafka.read(source)
    assert len(inputs) == N

    redis_base, prefix = redis_url
    delta = tmp_path / "congestion-delta"
    sinks = {
        "windows": f"{postgres_url}?table=windows",
        "trips": f"{mysql_url}?table=trips",
        "alerts": f"kafka://{kafka.bootstrap}/{alerts}",
        "dead-letters": f"{redis_base}?prefix={prefix}:dl",
        "sliding": f"{redis_base}?prefix={prefix}:sl",
        "congestion": f"delta:{delta}",
    }
    redis_at = f"Redis_at_{servers.REDIS.host}_{servers.REDIS.port}_0"
    hooked = {"windows": "PostgreSQL", "trips": "MySQL", "alerts": f"Kafka_topic_{alerts}",
              "dead-letters": f"{redis_at}_{prefix}_dl", "sliding": f"{redis_at}_{prefix}_sl",
              "congestion": "Delta_table"}
    args = ["run", "fleet", "--source", f"kafka://{kafka.bootstrap}/{source}?startingOffsets=earliest"
            f"&maxOffsetsPerTrigger={PER_TRIGGER}",
            *(a for output, uri in sinks.items() for a in ("--sink", f"{output}={uri}")),
            "--output-mode", "congestion=append", "--trip-gap", "5s", "--max-trip", "10s",
            "--state-dir", str(tmp_path / "state"), "--trigger", "available-now", "--no-live",
            "--conf", "spark.ui.enabled=false",
            # the Kafka connector's and Delta's jars, as the test's session fetched them: no run resolves them again
            "--conf", f"spark.jars={connector_jars(spark)}",
            # every batch's commit stays on disk, for the check below that each was committed once
            "--retain-batches", "1000",
            # a held partition keeps its task slot: enough slots for every query's partitions to reach the phase;
            # shuffle partitions pinned (the default is one per core), so that count is the same on any machine
            "--master", "local[16]", "--conf", f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}"]
    for phase, batch in PHASES:
        hold_and_kill(args, tmp_path, phase, batch, hooked, monkeypatch)
        if phase == "mid-write":  # the killed transaction's records are in the log, and nobody reading committed sees them
            assert len(kafka.read(alerts, committed_only=False)) > len(kafka.read(alerts))
    final = CliProcess(args, tmp_path, tmp_path / "final.log")
    assert final.wait(FINAL_RUN_S) == 0, final.tail()
    assert "stopped by end of input" in final.output() and not our_tracebacks(final.output())

    checkpoints = tmp_path / "state" / "checkpoints"
    for output in sinks:  # every batch committed once, in order, each held batch among them
        commits = batch_ids(checkpoints / output / "commits")
        assert commits == set(range(max(commits) + 1)) and commits >= {b for _, b in PHASES}, (output, sorted(commits))

    parsed = oracle.kafka_parsed(inputs)
    pings = oracle.first_copies([ping for _, _, ping in parsed if ping is not None])
    refused = [(offset, value) for offset, value, ping in parsed if ping is None]
    assert len(pings) > 0.95 * N

    def closed_by(output: str) -> datetime:
        return final_watermark(tmp_path / "state", output)

    expected_alerts = oracle.alerts(pings)
    written = kafka.read(alerts)
    assert len(expected_alerts) > 100
    assert sorted(r.key for r in written) == sorted(expected_alerts)  # each alert once: none lost, none twice
    assert {r.key: json.loads(r.value)["excess_kmh"] for r in written} == pytest.approx(expected_alerts)
    check_windows(postgres_url, pings, closed_by("windows"), at_least=200)
    check_trips(mysql_url, pings, closed_by("trips"))
    check_dead_letters(f"{prefix}:dl", refused)
    check_sliding(f"{prefix}:sl", pings, closed_by("sliding"))
    check_congestion(spark, delta, pings, closed_by("congestion"), fmt="delta")
