from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from speedlayer.core.errors import ConfigError
from speedlayer.core.uris import mask_secrets, parse_options, parse_uri


def test_parses_scheme_path_and_options():
    uri = parse_uri("files:///landing/x?format=json&max_files_per_trigger=3")
    assert (uri.scheme, uri.path, dict(uri.options)) == ("files", "/landing/x", {"format": "json", "max_files_per_trigger": "3"})


def test_relative_and_absolute_paths(tmp_path):
    assert parse_uri("parquet:out/windows").local_path(tmp_path) == tmp_path / "out/windows"
    assert parse_uri("parquet:///data/windows").local_path(tmp_path) == Path("/data/windows")


@pytest.mark.parametrize("text", ["nothing", "://x", "generator://?rate=1&rate=2"])
def test_bad_uris_are_one_line_config_errors(text):
    with pytest.raises(ConfigError) as err:
        parse_uri(text)
    assert "\n" not in str(err.value)


def test_passwords_are_masked_everywhere_they_can_appear():
    masked = mask_secrets("postgresql://app:s3cret@db:5432/x?password=p2&table=t")
    assert "s3cret" not in masked and "p2" not in masked
    assert masked == "postgresql://app:***@db:5432/x?password=***&table=t"
    assert parse_uri("postgresql://app:s3cret@db/x").display == "postgresql://app:***@db/x"


class _Opts(BaseModel):
    rate: int = Field(1, gt=0)


def test_options_are_validated_and_unknown_ones_listed():
    assert parse_options(_Opts, {"rate": "7"}, "gen://").rate == 7
    with pytest.raises(ConfigError, match="has no option 'speed'; known options: rate"):
        parse_options(_Opts, {"speed": "1"}, "gen://")
    with pytest.raises(ConfigError, match="option 'rate'.*greater than 0.*'-1'"):
        parse_options(_Opts, {"rate": "-1"}, "gen://")
    with pytest.raises(ConfigError, match=r"has no option 'rat' \(did you mean 'rate'\?\); known options: rate"):
        parse_options(_Opts, {"rat": "1"}, "gen://")


def test_a_broker_list_parses_without_a_single_port():
    uri = parse_uri("kafka://h1:9092,h2:9092/vehicles")
    assert (uri.scheme, uri.port, uri.path) == ("kafka", None, "/vehicles")


def test_secret_options_are_masked_by_name():
    shown = mask_secrets("kafka://b:9092/t?kafka.sasl.jaas.config=secretstuff&kafka.ssl.key.password=pw&table=t")
    assert "secretstuff" not in shown and "pw&" not in shown and "table=t" in shown


@pytest.mark.parametrize("text,port", [("postgresql://app:s3cret@db:54x2/fleet", "54x2"), ("mysql://root@db:abc/x", "abc"),
                                       ("redis://db:port/0", "port"), ("postgresql://app:s3cret@db:99999/fleet", "99999")])
def test_a_port_that_is_not_a_number_is_named_as_the_port(text, port):
    with pytest.raises(ConfigError) as refused:
        parse_uri(text, "sink URI")
    message = str(refused.value)
    assert f"port {port!r} is not a number from 0 to 65535" in message and "percent" not in message
    assert "s3cret" not in message and "\n" not in message
    shown = text.replace("s3cret", "***")  # the URI as written, only its password hidden
    assert f"sink URI {shown!r}" in message


def test_a_uri_without_a_scheme_is_shown_one_of_its_own_kind():
    from speedlayer.sinks import open_sink
    from speedlayer.sources import open_source

    with pytest.raises(ConfigError, match="source URI 'kafka//h:9092/t' has no scheme: write it like generator://"):
        open_source("kafka//h:9092/t")
    with pytest.raises(ConfigError, match="sink URI 'out/windows' has no scheme: write it like parquet:out/windows or "
                                          "postgresql://"):
        open_sink("out/windows")
