import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.fleet.zones import load_zones


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
