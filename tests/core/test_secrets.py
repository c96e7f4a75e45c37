"""Secrets never shown: secret-looking option names masked, passwords never echoed, even unparseable ones."""

import json

import pytest
from pydantic import BaseModel

from speedlayer.core.errors import ConfigError
from speedlayer.core.uris import is_secret_option, mask_secrets, parse_options, parse_uri
from speedlayer.runtime.settings import RunSettings

SECRET = "zq7Kx9SECRET"


@pytest.mark.parametrize("name", [
    "kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.password", "ssl.key",
    "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net", "fs.s3a.access.key", "fs.s3a.secret.key",
    "spark.authenticate.secret", "token", "api_token", "password", "db-passwd", "apiKey", "AccessKey",
    "spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net", "gcp.credentials",
])
def test_secret_looking_names_are_secrets(name):
    assert is_secret_option(name)


@pytest.mark.parametrize("name", [
    "key", "key_column", "partition.key", "kafka.key.deserializer", "table", "prefix", "keyspace", "monkey",
    "spark.sql.shuffle.partitions", "max_offsets_per_trigger", "spark.hadoop.fs.azure.account.auth.type", "seed",
])
def test_names_that_only_look_like_keys_are_not_secrets(name):
    assert not is_secret_option(name)


def test_a_percent_encoded_password_with_special_characters_is_masked():
    text = f"postgresql://app:pa%2F{SECRET}%23x%3Fy@db:5432/fleet?table=t&sslkey_password={SECRET}"
    shown = mask_secrets(text)
    assert SECRET not in shown
    assert shown == "postgresql://app:***@db:5432/fleet?table=t&sslkey_password=***"
    assert parse_uri(text).password == f"pa/{SECRET}#x?y"


@pytest.mark.parametrize("raw", [f"pa/{SECRET}", f"pa#{SECRET}", f"pa?{SECRET}", f"12/{SECRET}", f"12?{SECRET}",
                                 f"12#{SECRET}"])
def test_a_password_that_breaks_the_uri_is_never_echoed(raw):
    text = f"postgresql://app:{raw}@db:5432/fleet"
    assert SECRET not in mask_secrets(text)
    with pytest.raises(ConfigError) as refused:
        parse_uri(text, "sink URI")
    message = str(refused.value)
    assert SECRET not in message and "\n" not in message
    assert "percent-encode" in message and "%2F" in message and "%23" in message and "%3F" in message


def test_a_raw_at_sign_in_a_password_parses_and_is_masked():
    uri = parse_uri(f"postgresql://app:p@{SECRET}@db:5432/fleet")
    assert (uri.host, uri.password) == ("db", f"p@{SECRET}")
    assert uri.display == "postgresql://app:***@db:5432/fleet"


def test_an_at_sign_in_a_query_option_is_not_taken_for_a_password():
    uri = parse_uri('kafka://b:9092/t?kafka.sasl.jaas.config=x username="u@example.org"')
    assert uri.host == "b" and uri.password is None
    assert "u@example.org" not in uri.display and "kafka.sasl.jaas.config=***" in uri.display


def test_the_run_settings_written_and_printed_hold_no_secret():
    settings = RunSettings(
        job="fleet", source=f"kafka://b:9092/t?kafka.sasl.jaas.config={SECRET}a&kafka.ssl.keystore.key={SECRET}b",
        rides=f"kafka://b:9092/r?kafka.ssl.key.password={SECRET}c",
        sinks={"windows": f"postgresql://app:pa%2F{SECRET}d@db/x", "alerts": "parquet:out/a"},
        conf={"spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net": f"{SECRET}e",
              "spark.sql.shuffle.partitions": "4"},
        options={"api_token": f"{SECRET}f", "key": "vehicle_id"},
    )
    masked = settings.masked()
    assert SECRET not in json.dumps(masked)
    assert masked["conf"]["spark.sql.shuffle.partitions"] == "4"
    assert masked["options"] == {"api_token": "***", "key": "vehicle_id"}


class _Opts(BaseModel):
    api_token: int = 0


def test_a_bad_secret_option_value_is_not_echoed():
    with pytest.raises(ConfigError) as refused:
        parse_options(_Opts, {"api_token": SECRET}, "job x")
    assert SECRET not in str(refused.value) and "api_token" in str(refused.value)
