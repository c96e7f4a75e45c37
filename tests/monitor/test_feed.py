"""The views' results feed stays bounded, whatever the stream sends."""

from speedlayer.monitor.feed import ResultsFeed


def test_positions_keep_the_entities_heard_from_most_recently_up_to_the_cap():
    feed = ResultsFeed(max_positions=100)
    for batch in range(50):  # 5,000 vehicles never seen again, 20 per batch ... and one that reports every batch
        feed.set_positions(batch, [{"vehicle_id": f"V{batch}-{i}", "lat": 1.0} for i in range(100)]
                           + [{"vehicle_id": "steady", "lat": float(batch)}], "vehicle_id")
    positions = feed.snapshot()["positions"]
    assert len(positions) == 100
    kept = {p["vehicle_id"] for p in positions}
    assert {"steady", "V49-99", "V49-1"} <= kept and "V48-99" not in kept
    assert next(p for p in positions if p["vehicle_id"] == "steady")["lat"] == 49.0


def test_rolling_feeds_keep_their_newest_rows_only():
    from speedlayer.sinks.console import BatchView

    feed = ResultsFeed(feeds=["alerts"], feed_rows=10)
    for batch in range(30):
        feed.show_batch(BatchView("fleet", "alerts", batch, ["event_id"], [(f"e{batch}",)], 1))
    assert [r["event_id"] for r in feed.snapshot()["feeds"]["alerts"]] == [f"e{b}" for b in range(29, 19, -1)]
