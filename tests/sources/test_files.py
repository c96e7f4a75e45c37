"""files:// — a landing directory of JSON lines, CSV or parquet; bad rows become dead letters, nothing is lost."""

import json
from datetime import datetime, timezone

import pytest

from speedlayer.core.errors import ConfigError, SourceError
from speedlayer.core.schemas import RAW_SCHEMA
from speedlayer.decode.validate import decode
from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import open_source

HEADER = "event_id,vehicle_id,event_time,speed_kmh,lat,lon"


def line(eid, vid, t, speed):
    return json.dumps({"event_id": eid, "vehicle_id": vid, "event_time": t, "speed_kmh": speed, "lat": 52.6, "lon": 13.1})


def pings_source(uri):
    """The files source ``uri`` serving vehicle pings, as a fleet run opens it (csv/parquet columns named after them)."""
    source = open_source(uri)
    source.event_schema = VEHICLE_EVENT
    return source


def stream_raw(spark, uri, name, tmp_path):
    """Every RAW row the source yields for what is in the directory now (one available-now query)."""
    query = (pings_source(uri).read_stream(spark).writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / f"ck-{name}")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return spark.table(name)


def test_landing_files_feed_the_fleet_job(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "part-1.json").write_text("\n".join([
        line("a", "V1", "2026-11-01T10:00:01Z", 40.0),
        line("b", "V1", "2026-11-01T10:00:02Z", 60.0),
        "{not json",
        "",
    ]) + "\n")
    (landing / "part-2.json").write_text("\n".join([
        line("c", "V2", "2026-11-01T10:00:03Z", 30.0),
        line("b", "V1", "2026-11-01T10:00:02Z", 60.0),  # re-sent
        line("d", "V2", "2026-11-01T10:00:04Z", -5),
    ]) + "\n")
    s = RunSettings(job="fleet", source=f"files://{landing}?max_files_per_trigger=1", trigger="available-now",
                    state_dir=str(tmp_path / "st"), output_mode={"windows": "complete"},
                    sinks={"windows": "memory:files_windows", "alerts": "memory:files_alerts",
                           "dead-letters": "memory:files_dead"})
    summary = Run(spark, plan_run(s)).start_and_wait()
    assert summary.stopped_by == "end of input"
    windows = sorted((r.vehicle_id, r.events, r.max_speed_kmh) for r in spark.table("files_windows").collect())
    assert windows == [("V1", 2, 60.0), ("V2", 1, 30.0)]
    assert [r.event_id for r in spark.table("files_alerts").collect()] == ["b"]
    dead = sorted((r.reason, r.offset.rsplit("/", 1)[-1]) for r in spark.table("files_dead").collect())
    assert dead == [("field 'speed_kmh' is outside [0, 400]", "part-2.json:3"),
                    ("malformed JSON: not a JSON object", "part-1.json:3")]
    assert all(r.ingest_time is not None for r in spark.table("files_dead").collect())


def test_csv_rows_become_json_payloads_and_bad_rows_dead_letters(spark, tmp_path):
    landing = tmp_path / "csv"
    landing.mkdir()
    (landing / "a.csv").write_text("\n".join([
        HEADER,
        "a,V1,2026-11-01T10:00:01Z,40.5,52.6,13.1",
        "b,V1,2026-11-01T10:00:02Z",                  # too few fields
        "c,V1,2026-11-01T10:00:03Z,fast,52.6,13.1",   # not a number
        '"d,1",V2,2026-11-01T10:00:04Z,,52.6,13.1',   # quoted comma; speed left empty
    ]) + "\n")
    raw = stream_raw(spark, f"files://{landing}?format=csv", "files_csv", tmp_path)
    assert [(f.name, f.dataType) for f in raw.schema] == [(f.name, f.dataType) for f in RAW_SCHEMA]
    decoded = decode(raw, VEHICLE_EVENT)
    events = decoded.events.collect()
    assert [(e.event_id, e.speed_kmh, e.event_time) for e in events] == [
        ("a", 40.5, datetime(2026, 11, 1, 10, 0, 1))]
    dead = sorted((r.payload, r.reason) for r in decoded.dead_letters.collect())
    assert dead == [
        ("b,V1,2026-11-01T10:00:02Z", "malformed JSON: not a JSON object"),
        ('{"event_id":"c","vehicle_id":"V1","event_time":"2026-11-01T10:00:03Z","speed_kmh":"fast","lat":"52.6","lon":"13.1"}',
         "field 'speed_kmh' is not a valid double"),
        ('{"event_id":"d,1","vehicle_id":"V2","event_time":"2026-11-01T10:00:04Z","lat":"52.6","lon":"13.1"}',
         "missing field 'speed_kmh'"),
    ]
    # the offset is the file and the line (the header is line 1)
    assert sorted(r.offset.rsplit("/", 1)[-1] for r in raw.collect()) == ["a.csv:2", "a.csv:3", "a.csv:4", "a.csv:5"]


def test_a_csv_file_with_another_header_fails_the_query_naming_the_file(spark, tmp_path):
    landing = tmp_path / "csv"
    landing.mkdir()
    (landing / "ok.csv").write_text("\n" + HEADER.upper() + "\na,V1,2026-11-01T10:00:01Z,40.5,52.6,13.1\n")
    (landing / "bad.csv").write_text("event_id,speed_kmh\na,40\n")
    query = (pings_source(f"files://{landing}?format=csv").read_stream(spark).writeStream.format("memory")
             .queryName("files_csv_header").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match=f"CSV file file:{landing}/bad.csv has the header 'event_id,speed_kmh', "
                       f"expected '{HEADER}': fix its first line"):
        query.awaitTermination(120)


def test_parquet_rows_are_read_by_field_name_with_the_files_types(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = tmp_path / "pq"
    landing.mkdir()
    t = datetime(2026, 11, 1, 10, 0, 1, tzinfo=timezone.utc)
    pq.write_table(pa.table({
        "event_id": ["a", "b", "c"], "vehicle_id": ["V1", None, "V2"],
        "event_time": pa.array([t, t, t], pa.timestamp("ms", tz="UTC")),
        "speed_kmh": pa.array([40, 50, 900], pa.int32()),  # ints where doubles are expected
        "lat": [52.6, 52.6, 52.6], "lon": [13.1, 13.1, 13.1], "driver": ["x", "y", "z"],
    }), landing / "events.parquet")
    raw = stream_raw(spark, f"files://{landing}?format=parquet", "files_pq", tmp_path)
    decoded = decode(raw, VEHICLE_EVENT)
    assert [(e.event_id, e.speed_kmh, e.event_time) for e in decoded.events.collect()] == [
        ("a", 40.0, datetime(2026, 11, 1, 10, 0, 1))]
    dead = sorted((r.reason, r.offset.rsplit("/", 1)[-1]) for r in decoded.dead_letters.collect())
    assert dead == [("field 'speed_kmh' is outside [0, 400]", "events.parquet:3"),
                    ("missing field 'vehicle_id'", "events.parquet:2")]


def test_parquet_in_an_empty_directory_expects_the_wire_types(spark, tmp_path):
    source = pings_source(f"files://{tmp_path}?format=parquet")
    assert [(f.name, f.dataType.simpleString()) for f in source._parquet_schema(spark)] == [
        ("event_id", "string"), ("vehicle_id", "string"), ("event_time", "timestamp"),
        ("speed_kmh", "double"), ("lat", "double"), ("lon", "double")]


def test_columns_need_the_schema_of_the_job_served(spark, tmp_path):
    source = open_source(f"files://{tmp_path}?format=csv")  # no run set the events it serves
    with pytest.raises(ConfigError, match="format=csv reads columns named after the job's event schema"):
        source.read_stream(spark)


def test_archive_moves_processed_files_out_of_the_landing_directory(spark, tmp_path):
    landing, archive, out = tmp_path / "in", tmp_path / "done", tmp_path / "out"
    landing.mkdir()
    uri = f"files://{landing}?cleanSource=archive&sourceArchiveDir={archive}"

    def run_once():
        query = (open_source(uri).read_stream(spark).writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    (landing / "1.json").write_text(line("a", "V1", "2026-11-01T10:00:01Z", 40.0) + "\n")
    run_once()
    (landing / "2.json").write_text(line("b", "V1", "2026-11-01T10:00:02Z", 40.0) + "\n")
    run_once()  # Spark archives a batch's files once the next batch starts: here, on the restart
    assert sorted(r.offset.rsplit("/", 1)[-1] for r in spark.read.parquet(str(out)).collect()) == ["1.json:1", "2.json:1"]
    assert [p.name for p in archive.rglob("*.json")] == ["1.json"] and not (landing / "1.json").exists()


def test_nanosecond_parquet_timestamps_are_refused_in_one_line(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = datetime(2026, 11, 1, 10, 0, 1)
    pq.write_table(pa.table({"event_id": ["a"], "event_time": pa.array([t], pa.timestamp("ns"))}), tmp_path / "ns.parquet")
    with pytest.raises(SourceError, match="cannot read the parquet schema of .*ns.parquet .*write timestamps in ms or µs") as err:
        pings_source(f"files://{tmp_path}?format=parquet")._parquet_schema(spark)
    assert "\n" not in str(err.value)


# --- checked before start, no Spark -------------------------------------------------------------

def test_spark_spellings_of_options_are_accepted(tmp_path):
    source = open_source(f"files://{tmp_path}/in?format=csv&maxFilesPerTrigger=5&latestFirst=true")
    assert (source.options.max_files_per_trigger, source.options.latest_first) == (5, True)
    assert source._spark_options() == {"maxFilesPerTrigger": 5, "latestFirst": "true"}


@pytest.mark.parametrize("options,match", [
    ("clean_source=archive", "needs source_archive_dir"),
    ("clean_source=archive&source_archive_dir={d}/in/done", "must lie outside the landing directory"),
    ("clean_source=archive&source_archive_dir={d}", "must lie outside the landing directory"),
    ("source_archive_dir={d}/done", "only with clean_source=archive"),
    ("clean_source=move", "option 'clean_source'"),
    ("format=avro", "option 'format'"),
    ("maxFilesPerTrigger=1&max_files_per_trigger=2", "given twice"),
])
def test_bad_options_are_one_line_config_errors(tmp_path, options, match):
    with pytest.raises(ConfigError, match=match) as err:
        open_source(f"files://{tmp_path}/in?{options.format(d=tmp_path)}")
    assert "\n" not in str(err.value)


def test_clean_source_refuses_several_outputs(tmp_path):
    uri = f"files://{tmp_path}?clean_source=delete"
    with pytest.raises(ConfigError, match="clean_source=delete with 2 outputs"):
        plan_run(RunSettings(job="fleet", source=uri, sinks={"windows": "memory:a", "alerts": "memory:b"}))
    assert plan_run(RunSettings(job="fleet", source=uri, sinks={"alerts": "memory:b"})).source.options.clean_source == "delete"


def test_missing_directory_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="landing directory .*nowhere does not exist: create it"):
        open_source(f"files://{tmp_path}/nowhere?format=csv").check()
