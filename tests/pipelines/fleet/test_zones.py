import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.fleet.zones import load_zones, zone_of


def test_built_in_table_ends_with_a_catch_all_zone():
    zones = load_zones()
    assert zones[0].zone_id == "Z01"
    assert (zones[-1].min_lat, zones[-1].max_lat) == (-90, 90)
    assert all(z.speed_limit_kmh > 0 for z in zones)


def test_a_user_table_is_validated(tmp_path):
    good = tmp_path / "zones.csv"
    good.write_text("zone_id,name,min_lat,max_lat,min_lon,max_lon,speed_limit_kmh\nA,x,0,1,0,1,30\n")
    assert load_zones(str(good))[0].speed_limit_kmh == 30
    bad = tmp_path / "bad.csv"
    bad.write_text("zone_id,name,min_lat,max_lat,min_lon,max_lon,speed_limit_kmh\nA,x,1,0,0,1,30\n")
    with pytest.raises(ConfigError, match="line 2: bounds must satisfy min <= max"):
        load_zones(str(bad))
    bad.write_text("zone,limit\nA,30\n")
    with pytest.raises(ConfigError, match="expected columns zone_id, name"):
        load_zones(str(bad))
    with pytest.raises(ConfigError, match="does not exist"):
        load_zones(str(tmp_path / "none.csv"))


def test_the_lookup_takes_the_first_zone_containing_the_point_bounds_included(spark, tmp_path):
    table = tmp_path / "zones.csv"
    table.write_text("zone_id,name,min_lat,max_lat,min_lon,max_lon,speed_limit_kmh\n"
                     "inner,O'Brien's \\ yard,1,2,1,2,7.5\n"
                     "outer,ring,0,3,0,3,50\n")
    zones = load_zones(str(table))
    points = [(1.5, 1.5), (1.0, 2.0), (0.5, 2.5), (3.0, 0.0), (3.5, 1.0), (None, 1.0)]

    def first_zone(lat, lon):  # the oracle: the table's rows in order, bounds included
        inside = [z for z in zones if lat is not None and z.min_lat <= lat <= z.max_lat and z.min_lon <= lon <= z.max_lon]
        return (inside[0].zone_id, inside[0].name, inside[0].speed_limit_kmh) if inside else (None, None, None)

    frame = spark.createDataFrame(points, "lat double, lon double")
    got = [tuple(row) for row in frame.select(*zone_of("lat", "lon", zones)).collect()]
    assert got == [first_zone(*p) for p in points]
    assert got[0] == ("inner", "O'Brien's \\ yard", 7.5) and got[4] == (None, None, None)
