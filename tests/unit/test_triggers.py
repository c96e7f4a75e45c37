import pytest

from speedlayer.errors import ConfigError
from speedlayer.triggers import Trigger, parse_trigger


def test_parses_every_trigger_kind():
    assert parse_trigger("processing:5s") == Trigger("processing", 5000)
    assert parse_trigger("processing:0s") == Trigger("processing", 0)
    assert parse_trigger("available-now") == Trigger("available-now")
    assert parse_trigger("once").bounded
    assert parse_trigger("continuous:1s").continuous
    assert str(parse_trigger("continuous:1s")) == "continuous:1s"


@pytest.mark.parametrize("spec,match", [("bogus", "unknown trigger"), ("processing", "needs an interval"),
                                        ("available-now:1s", "takes no interval"), ("continuous:0s", "above zero"),
                                        ("processing:5", "use a number with a unit")])
def test_bad_triggers_say_what_fits(spec, match):
    with pytest.raises(ConfigError, match=match):
        parse_trigger(spec)
