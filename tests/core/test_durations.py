import pytest

from speedlayer.core.durations import format_duration, parse_duration, positive_duration, spark_interval
from speedlayer.core.errors import ConfigError


@pytest.mark.parametrize("text,ms", [("5s", 5000), ("1min", 60_000), ("250ms", 250), ("2h", 7_200_000),
                                     ("1.5s", 1500), ("10 seconds", 10_000), ("0", 0), ("3 days", 259_200_000)])
def test_parses_durations_with_units(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["5", "5x", "", "fast", "-5s", "s"])
def test_refuses_durations_without_a_known_unit(text):
    with pytest.raises(ConfigError, match="e.g. 500ms, 5s"):
        parse_duration(text)


def test_zero_is_refused_where_a_positive_duration_is_needed():
    with pytest.raises(ConfigError, match="--window must be longer than zero"):
        positive_duration("0s", "--window")


def test_spark_and_human_forms():
    assert spark_interval(10_000) == "10 seconds"
    assert spark_interval(1500) == "1500 milliseconds"
    assert format_duration(90_000) == "90s" and format_duration(250) == "250ms"
