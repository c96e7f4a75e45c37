"""A Kafka broker stopped in the middle of a Kafka -> Kafka run. Started again, the run rides through, and a
read-committed consumer of the alerts topic sees every alert once, as the plain oracle finds them; gone for
good, the run stops with one line.

The broker is one of the test's own (``tests.local_servers.Kafka``), so stopping it harms no other test.
"""

from __future__ import annotations

import json
import time

import pytest

from tests import oracle
from tests.e2e.killing import CliProcess, batch_ids, our_tracebacks, wait_for
from tests.kafka_topics import KafkaTopics
from tests.local_servers import Kafka, ServerError
from tests.servers import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

N, PER_TRIGGER = 4_000, 1_000
DOWN_S = 10


@pytest.fixture
def broker():
    """A broker of the test's own: stopping it harms no other test."""
    server = Kafka()
    try:
        server.start()
    except ServerError as exc:
        unavailable(str(exc))
    yield server
    server.stop()


def test_a_broker_restarted_mid_run_loses_and_repeats_no_alert(broker, tmp_path):
    topics = KafkaTopics(broker.bootstrap)
    source, alerts = topics.create(prefix="fastcars"), topics.create(prefix="alerts")
    topics.produce(source, _pings(N))
    inputs = topics.read(source)
    assert len(inputs) == N

    run = CliProcess(["run", "fleet", "--source", f"kafka://{broker.bootstrap}/{source}?startingOffsets=earliest"
                      f"&maxOffsetsPerTrigger={PER_TRIGGER}", "--sink", f"alerts=kafka://{broker.bootstrap}/{alerts}",
                      "--state-dir", str(tmp_path / "state"), "--trigger", "available-now", "--no-live",
                      "--conf", "spark.ui.enabled=false"], tmp_path, tmp_path / "run.log")
    commits = tmp_path / "state" / "checkpoints" / "alerts" / "commits"
    wait_for(lambda: len(batch_ids(commits)) >= 2, run, 300, "two committed batches")
    broker.stop(remove=False)  # the broker goes away mid-run: the next batch cannot read nor write
    stopped_at = len(batch_ids(commits))
    time.sleep(DOWN_S)
    assert len(batch_ids(commits)) <= stopped_at + 1, "batches went on committing without a broker"
    broker.start(fresh=False)  # same port, same log directory: its records and transactions are back
    assert run.wait(600) == 0, run.tail()
    assert not our_tracebacks(run.output())

    expected = oracle.alerts(oracle.kafka_pings(inputs))
    written = topics.read(alerts)
    assert len(expected) > 50
    assert sorted(r.key for r in written) == sorted(expected)  # none lost, none twice
    assert {r.key: json.loads(r.value)["excess_kmh"] for r in written} == pytest.approx(expected)


def test_a_broker_that_does_not_come_back_stops_the_run_in_bounded_time_with_one_line(broker, tmp_path):
    topics = KafkaTopics(broker.bootstrap)
    source, alerts = topics.create(prefix="fastcars"), topics.create(prefix="alerts")
    topics.produce(source, _pings(3_000))
    # The reader's client gives up after default.api.timeout.ms (60 s) times fetchOffset.numRetries (3),
    # shortened here, as a user who wants to know sooner would.
    reader = "&maxOffsetsPerTrigger=500&kafka.request.timeout.ms=2000&kafka.default.api.timeout.ms=4000"
    run = CliProcess(["run", "fleet", "--source", f"kafka://{broker.bootstrap}/{source}?startingOffsets=earliest{reader}",
                      "--sink", f"alerts=kafka://{broker.bootstrap}/{alerts}?retry_for=4s",
                      "--state-dir", str(tmp_path / "state"), "--trigger", "processing:1s", "--no-live",
                      "--conf", "spark.ui.enabled=false"], tmp_path, tmp_path / "run.log")
    commits = tmp_path / "state" / "checkpoints" / "alerts" / "commits"
    wait_for(lambda: len(batch_ids(commits)) >= 1, run, 300, "a committed batch")
    broker.stop()
    stopped = time.monotonic()
    code = run.wait(300)
    took = time.monotonic() - stopped
    output = run.output()
    assert code == 1, output[-3000:]
    assert not our_tracebacks(output)
    last = output.strip().splitlines()[-1]
    print(f"stopped {took:.0f}s after the broker; last line: {last}")
    assert last.startswith("error: query fleet_alerts failed: lost Kafka"), last
    assert broker.bootstrap in last and "start the broker" in last, last


def _pings(n: int) -> list[tuple[str, str]]:
    """Ten pings a second from 40 vehicles over Berlin, some over their zone's limit."""
    return [(f"V{i % 40}", json.dumps({"event_id": f"e{i}", "vehicle_id": f"V{i % 40}", "speed_kmh": 20.0 + i * 7 % 130,
                                       "event_time": f"2026-11-01T10:{i // 600:02d}:{i // 10 % 60:02d}Z",
                                       "lat": 52.45 + (i % 17) / 100, "lon": 13.3 + (i % 23) / 100})) for i in range(n)]
