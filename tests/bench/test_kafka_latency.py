"""The Kafka latency measurement against the suite's broker: its figures equal the ones computed here from
both topics' records (the broker's append times), and every alert the oracle expects is measured."""

from speedlayer.bench.cell import percentile
from speedlayer.bench.kafka_latency import LOG_APPEND_TIME, measure_cell, speedlayer_alerts
from tests import oracle


def test_the_latency_of_every_expected_alert_is_measured_from_the_brokers_append_times(spark, kafka, tmp_path):
    seen = {}
    run_alerts = speedlayer_alerts(spark, kafka.bootstrap, "continuous:1s", str(tmp_path))

    def start(source: str, out: str):
        stop = run_alerts(source, out)

        def stop_and_read():  # before the cell deletes its topics
            stop()
            seen["in"], seen["out"] = kafka.read(source), kafka.read(out)
            seen["config"] = kafka.topic_config(source, "message.timestamp.type")
        return stop_and_read

    cell = measure_cell(kafka.bootstrap, "speedlayer", "continuous:1s", 300, start, warmup_s=4, measure_s=4)

    assert seen["config"] == LOG_APPEND_TIME["message.timestamp.type"]
    assert cell.status == "ok" and 1_500 <= cell.sent <= 3_000
    begin, end = cell.span_ms
    appended = {p.event_id: r.timestamp_ms for r, p in zip(seen["in"], _pings(seen["in"]))}
    in_span = [p for r, p in zip(seen["in"], _pings(seen["in"])) if begin <= r.timestamp_ms < end]
    expected = oracle.alerts(in_span)
    written = {r.key: r.timestamp_ms for r in seen["out"]}
    assert expected and set(expected) <= set(written)  # every alert of the span arrived
    latencies = [written[e] - appended[e] for e in expected]
    assert cell.measured == len(expected)
    assert min(latencies) >= 0
    assert (cell.p50_ms, cell.p99_ms, cell.max_ms) == (percentile(latencies, 50), percentile(latencies, 99),
                                                       max(latencies))


def _pings(records):
    parsed = oracle.kafka_parsed(records)
    assert all(p is not None for _, _, p in parsed)  # the bench writes no bad pings
    return [p for _, _, p in parsed]
