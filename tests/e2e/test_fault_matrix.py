"""The fault matrix: SIGKILL at each phase of a micro-batch, for every kind of sink at once, checked by a plain oracle.

One fleet run writes five outputs to the five kinds of sink: ``windows`` to PostgreSQL, ``alerts``
to MariaDB, ``dead-letters`` to a Redis stream, ``sliding`` to Redis hashes (latest window per
vehicle), ``congestion`` to Parquet. The run is held at a named phase of one micro-batch by
``speedlayer.core.faults`` (every foreachBatch sink stops there and leaves a marker), the test sees
every marker and the checkpoint showing that batch planned and not committed, then kills the
whole process group and restarts the same command at the next phase:

planned (nothing written) -> mid-write (part of the batch written) -> partition-written (state
store versions committed) -> written (every row written, the commit log not yet).

Every run reads with ``--trigger available-now`` (``PER_TRIGGER`` entries a batch), so the last one
ends by itself at the end of the stream, and a query whose sink has no hook (Parquet) does not spin
empty batches while the others are held. What the five sinks then hold is
compared with ``tests.oracle``: the results computed in plain Python from the raw entries of the
Redis stream, without Spark or the job's code. No row missing, none twice, every value right.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from speedlayer.core.faults import DIR_ENV, ENV
from tests import oracle, servers
from tests.e2e.checks import (
    check_alerts,
    check_congestion,
    check_dead_letters,
    check_sliding,
    check_windows,
    naive_utc,
    raw_entries,
)
from tests.e2e.conftest import N
from tests.e2e.killing import CliProcess, batch_ids, our_tracebacks, query_state, states, wait_for

# one of tests/conftest.py's HEAVY_MODULES: beside the cluster tests the machine was too busy for Spark to
# start its Python source planners in time (they print a traceback that this test forbids)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

#: events per micro-batch: N of them make five batches (20 s of event time each), the last one held
PER_TRIGGER = 4_000
#: the phase each run is held at, and in which batch of each query (every query has rows to write from
#: batch 1 on: the watermark, 5 s behind the newest event, closes windows of the batch before)
PHASES = [("planned", 1), ("mid-write", 2), ("partition-written", 3), ("written", 4)]
HELD_WITHIN_S, FINAL_RUN_S = 300, 600


def hold_and_kill(args: list[str], workdir: Path, phase: str, batch: int, hooked: dict[str, str],
                  monkeypatch) -> None:
    """Run until every hooked sink holds at ``phase`` of ``batch``; check the checkpoints; SIGKILL."""
    markers = workdir / "markers" / phase
    monkeypatch.setenv(ENV, f"{phase}:{batch}")
    monkeypatch.setenv(DIR_ENV, str(markers))
    process = CliProcess(args, workdir, workdir / f"{phase}.log")

    def all_held() -> bool:
        names = [m.name for m in markers.iterdir()] if markers.is_dir() else []
        return all(any(n.startswith(f"{phase}-{batch}-{sink}") for n in names) for sink in hooked.values())

    wait_for(all_held, process, HELD_WITHIN_S, f"every sink held at {phase} of batch {batch}")
    process.kill()
    checkpoints = workdir / "state" / "checkpoints"
    for output in hooked:
        held = query_state(checkpoints / output)
        assert held.in_flight == batch, (phase, output, held)  # planned, not committed: the moment claimed
    # the stateful query's state store: no version of the batch before anything ran, one once a partition's
    # rows are all written (mid-write: either, as Spark's feeder thread may run ahead of the Python writer)
    versions = {p.name.split(".")[0] for p in (checkpoints / "sliding" / "state").rglob("*") if p.is_file()}
    if phase != "mid-write":
        assert (str(batch + 1) in versions) == (phase != "planned"), (phase, sorted(versions))
    monkeypatch.delenv(ENV)


def test_sigkill_at_every_phase_loses_and_repeats_nothing_in_any_sink(spark, stream, postgres_url, mysql_url, redis_url,
                                                                      tmp_path, monkeypatch):
    redis_base, prefix = redis_url
    sinks = {
        "windows": f"{postgres_url}?table=windows",
        "alerts": f"{mysql_url}?table=alerts",
        "dead-letters": f"{redis_base}?prefix={prefix}:dl",
        "sliding": f"{redis_base}?prefix={prefix}:sl",
        "congestion": f"parquet:{tmp_path / 'out' / 'congestion'}",
    }
    redis_at = f"Redis_at_{servers.REDIS.host}_{servers.REDIS.port}_0"
    hooked = {"windows": "PostgreSQL", "alerts": "MySQL", "dead-letters": f"{redis_at}_{prefix}_dl",
              "sliding": f"{redis_at}_{prefix}_sl"}
    args = ["run", "fleet", "--source", f"{stream}&max_records_per_trigger={PER_TRIGGER}",
            *(a for output, uri in sinks.items() for a in ("--sink", f"{output}={uri}")),
            "--output-mode", "congestion=append", "--state-dir", str(tmp_path / "state"),
            "--trigger", "available-now", "--no-live", "--conf", "spark.ui.enabled=false",
            # every batch's commit stays on disk, for the check below that each was committed once
            "--retain-batches", "1000",
            # a held partition keeps its task slot: enough slots for every query's partitions to reach the phase
            "--master", "local[12]"]
    for phase, batch in PHASES:
        hold_and_kill(args, tmp_path, phase, batch, hooked, monkeypatch)
    final = CliProcess(args, tmp_path, tmp_path / "final.log")
    assert final.wait(FINAL_RUN_S) == 0, final.tail()
    assert "stopped by end of input" in final.output() and not our_tracebacks(final.output())

    checkpoints = tmp_path / "state" / "checkpoints"
    for output in sinks:  # every batch committed once, in order, each held batch among them
        commits = batch_ids(checkpoints / output / "commits")
        assert commits == set(range(max(commits) + 1)) and commits >= {b for _, b in PHASES}, (output, sorted(commits))
    watermarks = {q["output"]: q["watermark"] for q in json.loads((tmp_path / "state" / "last-run.json").read_text())["queries"]}
    assert set(states(checkpoints)) == set(sinks)

    entries = raw_entries(stream)
    parsed = [(offset, payload, oracle.parse(payload, ingest)) for offset, payload, ingest in entries]
    pings = oracle.first_copies([p for _, _, p in parsed if p is not None])
    assert len(entries) == N and len(pings) > 0.95 * N

    def closed_by(output: str) -> datetime:
        return naive_utc(watermarks[output])

    check_windows(postgres_url, pings, closed_by("windows"))
    check_alerts(mysql_url, pings)
    check_dead_letters(f"{prefix}:dl", [(o, p) for o, p, ping in parsed if ping is None])
    check_sliding(f"{prefix}:sl", pings, closed_by("sliding"))
    check_congestion(spark, tmp_path / "out" / "congestion", pings, closed_by("congestion"))
