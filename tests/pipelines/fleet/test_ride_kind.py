"""The generator's ride requests (reproducible by seed: tests/sources/test_generator.py): faults as asked,
pickups where the vehicles drive."""

from pyspark.sql import functions as F

from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import RIDE_REQUEST
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import open_source
from tests.helpers import batch_output

START = "2026-11-22T10:00:00Z"


def test_faults_become_dead_letters_and_resent_requests_repeat_their_id(spark):
    n = 10_000
    raw = open_source(f"generator://?kind=rides&seed=1&start={START}&malformed=0.05&duplicates=0.05&late=0").read_batch(spark, n)
    decoded = decode(raw, RIDE_REQUEST)
    assert 0.04 * n < decoded.dead_letters.count() < 0.065 * n
    reasons = {r.reason for r in decoded.dead_letters.select("reason").distinct().collect()}
    assert {"missing field 'rider_id'", "field 'pickup_lat' is outside [-90, 90]", "malformed JSON: not a JSON object",
            "field 'request_time' is not a valid timestamp (ISO-8601 or epoch milliseconds)"} <= reasons
    events = decoded.events
    assert 0.035 * n < events.count() - events.select("request_id").distinct().count() < 0.065 * n
    low, high = events.agg(F.min("pickup_lat"), F.max("pickup_lat")).first()
    assert 52.3 < low < high < 52.7  # around Berlin, where the vehicles drive


def test_at_default_settings_nearly_every_request_has_a_candidate(spark):
    s = RunSettings(job="fleet", source=f"generator://?seed=3&start={START}&rate=200&vehicles=100&late=0&malformed=0",
                    rides=f"generator://?kind=rides&seed=3&start={START}&rate=200&vehicles=100&late=0&malformed=0",
                    max_events=2000, sinks={"matches": "memory:x"})
    matched = batch_output(spark, s, "matches").select("request_id").distinct().count()
    assert matched > 0.9 * 2000
