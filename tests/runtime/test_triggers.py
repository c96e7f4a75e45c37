import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.triggers import Trigger, parse_trigger


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


def test_realtime_takes_a_batch_duration_or_sparks_default():
    assert parse_trigger("realtime:5m") == Trigger("realtime", 300_000)
    assert parse_trigger("realtime:30s").realtime
    assert parse_trigger("realtime:") == parse_trigger("realtime") == Trigger("realtime", 300_000)
    assert str(parse_trigger("realtime:1min")) == "realtime:60s"
    rt = parse_trigger("realtime:1min")
    assert not rt.continuous and not rt.bounded


def test_realtime_needs_a_positive_duration():
    with pytest.raises(ConfigError, match="realtime trigger needs a batch duration above zero"):
        parse_trigger("realtime:0s")
    with pytest.raises(ConfigError, match="use a number with a unit"):
        parse_trigger("realtime:soon")


def test_realtime_is_applied_as_sparks_real_time_trigger():
    class Writer:
        def trigger(self, **kwargs):
            self.kwargs = kwargs
            return self

    assert parse_trigger("realtime:2min").apply(Writer()).kwargs == {"realTime": "120000 milliseconds"}
