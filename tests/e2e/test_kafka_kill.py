"""SIGKILL at each phase of a micro-batch of a run from Kafka into Kafka, PostgreSQL and Delta Lake, checked
by a plain oracle.

The fleet job reads a topic that ``speedlayer produce`` filled (keyed by vehicle over two
partitions) and writes ``alerts`` to a Kafka topic (exactly once, by transactions), ``windows``
to PostgreSQL and ``congestion`` to a Delta table (Delta's txnAppId/txnVersion). Each run is held
at one phase of one batch (``speedlayer.core.faults``), killed whole, and the same command runs
again; the last run ends by itself (``--trigger available-now``). The alerts topic is then read by
a consumer with ``isolation.level=read_committed``, the table by psycopg, the Delta table through
its log, and each compared with ``tests.oracle`` over the records read back from the input topic.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from speedlayer.core.faults import DIR_ENV, ENV
from tests import oracle
from tests.e2e.checks import check_congestion, check_windows, final_watermark
from tests.e2e.killing import CliProcess, batch_ids, our_tracebacks, query_state, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

N, PER_TRIGGER = 8_000, 1_600
#: the phase each run is held at, and in which batch (windows close from batch 1 on)
PHASES = [("planned", 1), ("mid-write", 2), ("partition-written", 3), ("written", 4)]
HELD_WITHIN_S, FINAL_RUN_S = 300, 600


def test_sigkill_at_every_phase_writes_every_output_once(spark, kafka, postgres_url, tmp_path, monkeypatch, run_cli):
    source, alerts = kafka.create(prefix="fastcars"), kafka.create(prefix="alerts")
    start = (datetime.now(timezone.utc) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:00Z")
    produced = run_cli("produce", "--to", f"kafka://{kafka.bootstrap}/{source}", "--max-events", str(N), "--rate", "0",
                       "--generator", "generator://?seed=23&late=0&rate=200&vehicles=100", "--start", start,
                       "--no-progress")
    assert produced.returncode == 0, produced.stderr[-2000:]
    inputs = kafka.read(source)
    assert len(inputs) == N

    delta = tmp_path / "congestion-delta"
    hooked = {"alerts": f"Kafka_topic_{alerts}", "windows": "PostgreSQL", "congestion": "Delta_table"}
    #: the phases each sink passes (a Delta append is one step: no partition is written apart)
    passes = {"Delta_table": ("planned", "written")}
    args = ["run", "fleet", "--source", f"kafka://{kafka.bootstrap}/{source}?startingOffsets=earliest"
            f"&maxOffsetsPerTrigger={PER_TRIGGER}",
            "--sink", f"alerts=kafka://{kafka.bootstrap}/{alerts}", "--sink", f"windows={postgres_url}?table=windows",
            "--sink", f"congestion=delta:{delta}", "--output-mode", "congestion=append",
            "--state-dir", str(tmp_path / "state"), "--trigger", "available-now", "--no-live",
            "--conf", "spark.ui.enabled=false", "--master", "local[6]",
            "--retain-batches", "1000"]  # every commit stays on disk, for the check that each batch committed once
    checkpoints = tmp_path / "state" / "checkpoints"
    for phase, batch in PHASES:
        markers = tmp_path / "markers" / phase
        monkeypatch.setenv(ENV, f"{phase}:{batch}")
        monkeypatch.setenv(DIR_ENV, str(markers))
        process = CliProcess(args, tmp_path, tmp_path / f"{phase}.log")

        def all_held(markers=markers, phase=phase, batch=batch) -> bool:
            names = [m.name for m in markers.iterdir()] if markers.is_dir() else []
            return all(any(n.startswith(f"{phase}-{batch}-{sink}") for n in names) for sink in hooked.values()
                       if phase in passes.get(sink, (phase,)))

        wait_for(all_held, process, HELD_WITHIN_S, f"every sink held at {phase} of batch {batch}")
        process.kill()
        for output, sink in hooked.items():  # planned, not committed (a sink not held here was killed wherever it was)
            if phase in passes.get(sink, (phase,)):
                assert query_state(checkpoints / output).in_flight == batch, (phase, output)
        if phase == "mid-write":  # the killed transaction's records are in the log, and nobody reading committed sees them
            assert len(kafka.read(alerts, committed_only=False)) > len(kafka.read(alerts))
        monkeypatch.delenv(ENV)

    final = CliProcess(args, tmp_path, tmp_path / "final.log")
    assert final.wait(FINAL_RUN_S) == 0, final.tail()
    assert not our_tracebacks(final.output())
    for output in hooked:
        commits = batch_ids(checkpoints / output / "commits")
        assert commits == set(range(max(commits) + 1)) and commits >= {b for _, b in PHASES}, (output, sorted(commits))

    pings = oracle.kafka_pings(inputs)
    expected = oracle.alerts(pings)
    written = kafka.read(alerts)
    assert len(expected) > 100
    assert sorted(r.key for r in written) == sorted(expected)  # each alert once: none lost, none twice
    assert {r.key: json.loads(r.value)["excess_kmh"] for r in written} == pytest.approx(expected)
    check_windows(postgres_url, pings, final_watermark(tmp_path / "state", "windows"), at_least=200)
    check_congestion(spark, delta, pings, final_watermark(tmp_path / "state", "congestion"), fmt="delta")
