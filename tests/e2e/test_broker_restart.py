"""A Redis broker restarted in the middle of a run, with its data on disk: the run rides through, every alert once.

A private redis-server with an append-only file (``appendonly yes``, ``appendfsync always``, its
own directory) is both the source (a few thousand fleet events, ``XADD`` with redis-py, read 500 per
micro-batch) and the sink (the alerts stream and its committed hash). The sink reaches it through a
``TcpProxy`` whose trap holds the sink's writer inside a batch's write (about to send its second
Lua call of the batch); there the proxy goes down (so the sink's retries wait until the restarted
server has been looked at), the server is shut down (``SHUTDOWN``) and started again on the same
port with the same directory, and the proxy comes back. The sink's retries carry the batch over
the restart; the source, connected directly, reads on from the restarted server.

Checked: the moment (the batch planned, not committed; the stream holding some but not all of the
batch's alerts, exactly as many as its committed hash counts, the same after the restart), and at
the end the alerts stream equal to the plain oracle over the source stream's entries.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests import oracle
from tests.e2e.fleet_input import event_files
from tests.e2e.killing import query_state
from tests.e2e.test_database_outage import assert_exact, stopped_on_error
from tests.servers import RedisServer
from tests.sinks.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SOURCE, ALERTS, WRITER = "vehicles", "alerts", "fleet:alerts"
PER_TRIGGER, ARM_AFTER_COMMIT, WITHIN_S = 500, 2, 180


def entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def source_entries(client) -> list[tuple[str, str]]:
    """(id, payload) of every entry of the source stream."""
    return [(entry_id, fields.get("value")) for entry_id, fields in client.xrange(SOURCE)]


def alerts_through(entries: list[tuple[str, str]], last_id: str | None) -> dict[str, float]:
    """The oracle's alerts of the entries up to ``last_id`` (None: all); ingest time is the entry id's."""
    upto = entry_order(last_id) if last_id else None
    pings = [oracle.parse(payload, datetime.fromtimestamp(entry_order(i)[0] / 1000, timezone.utc).replace(tzinfo=None))
             for i, payload in entries if upto is None or entry_order(i) <= upto]
    return oracle.alerts(oracle.first_copies([p for p in pings if p is not None]))


def planned_end(checkpoint: Path, batch: int) -> str | None:
    """The last source entry id of ``batch`` in the offset log (None before the first batch)."""
    if batch < 0:
        return None
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])[SOURCE]["id"]


def wait_until(condition, run: Run, what: str) -> None:
    deadline = time.monotonic() + WITHIN_S
    while not condition():
        assert run.queries[0].isActive and time.monotonic() < deadline, f"no {what}: {run.queries[0].exception()}"
        time.sleep(0.05)


def test_a_redis_restart_inside_a_write_is_ridden_through_with_every_alert_once(spark, small_writes, tmp_path):
    import redis

    lines = [line for batch in event_files(6, PER_TRIGGER) for line in batch]
    with RedisServer(appendonly=True, appendfsync="always") as server, TcpProxy(("127.0.0.1", server.port)) as proxy:
        client = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
        pipe = client.pipeline(transaction=False)
        for line in lines:
            pipe.xadd(SOURCE, {"value": line})
        pipe.execute()
        checkpoint = tmp_path / "state" / "checkpoints" / "alerts"
        s = RunSettings(job="fleet", source=f"{server.url}?stream={SOURCE}&max_records_per_trigger={PER_TRIGGER}",
                        max_events=len(lines), trigger="processing:0s", state_dir=str(tmp_path / "state"),
                        sinks={"alerts": f"redis://127.0.0.1:{proxy.port}/0?stream={ALERTS}&retry_for=60s"})
        run = Run(spark, plan_run(s))
        run.start()
        with stopped_on_error(run):
            wait_until(lambda: query_state(checkpoint).committed >= ARM_AFTER_COMMIT, run, "commit of batch 2")
            trap = proxy.hold_at(b"EVALSHA", occurrence=2)
            wait_until(trap.sprung.is_set, run, "sink writer held at its second write")
            held = query_state(checkpoint)
            proxy.down()  # the sink's retries wait outside until the restarted server has been looked at
            trap.release.set()
            before = (client.hget(f"{ALERTS}:committed", WRITER), client.xlen(ALERTS))
            server.restart()
            client.close()
            client = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
            after = (client.hget(f"{ALERTS}:committed", WRITER), client.xlen(ALERTS), client.xlen(SOURCE))
            proxy.up()
        summary = run.wait()
        entries = source_entries(client)
        stored = [(f["event_id"], float(f["excess_kmh"])) for _, f in client.xrange(ALERTS)]
        client.close()
    assert summary.stopped_by == f"--max-events {len(lines)}"
    batch = held.in_flight
    assert batch is not None and batch > ARM_AFTER_COMMIT, held
    assert after == (*before, len(lines))  # the append-only file kept the stream, its committed hash, the source
    start_alerts = len(alerts_through(entries, planned_end(checkpoint, batch - 1)))
    end_alerts = len(alerts_through(entries, planned_end(checkpoint, batch)))
    mark_batch, _, mark_rows = before[0].partition(":")
    assert (int(mark_batch), start_alerts + int(mark_rows)) == (batch, before[1])  # the hash counts what is in
    assert start_alerts < before[1] < end_alerts, (start_alerts, before, end_alerts)  # some of the batch, not all
    print(f"restarted in batch {batch}: {before[1] - start_alerts} of its {end_alerts - start_alerts} alerts "
          f"in the stream, {start_alerts} before it")
    assert_exact(stored, alerts_through(entries, None))
