"""The minimal Redis connection: replies cut at any byte, odd entries, errors, AUTH and SELECT."""

from __future__ import annotations

import pytest

from speedlayer import redis_wire
from speedlayer.redis_wire import RedisWire, WireError, parse


def connect(url: str, **kw) -> RedisWire:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return RedisWire(parts.hostname, parts.port, int(parts.path.strip("/") or 0), **kw).connect()


@pytest.mark.parametrize("recv", [1, 7, 1 << 20])
def test_xadd_and_xrange_survive_replies_cut_anywhere(redis_url, monkeypatch, recv):
    url, prefix = redis_url
    monkeypatch.setattr(redis_wire, "_RECV", recv)
    values = [f'{{"n": {i}, "text": "line\\r\\nbreak *2\\r\\n$5"}}'.encode() for i in range(50)] + [b"", "ünï".encode()]
    with connect(url) as wire:
        wire.xadd_many([f"{prefix}:a"] * len(values), values)
        ids, got = wire.xrange(f"{prefix}:a", "-", "+", 1000)
        assert got == values and len(set(ids)) == len(values)
        ids2, got2 = wire.xrange(f"{prefix}:a", f"({ids[9].decode()}", ids[19].decode(), 1000)
        assert got2 == values[10:20] and ids2 == ids[10:20]
        assert wire.xrange(f"{prefix}:missing", "-", "+", 10) == ([], [])


def test_entries_with_other_fields_or_no_value(redis_url):
    import redis

    url, prefix = redis_url
    client = redis.Redis.from_url(url)
    client.xadd(prefix, {"value": "a"})
    client.xadd(prefix, {"source": "x", "value": "b", "more": "y"})
    client.xadd(prefix, {"other": "c"})
    client.xadd(prefix, {"value": "d"})
    client.close()
    with connect(url) as wire:
        assert wire.xrange(prefix, "-", "+", 10)[1] == [b"a", b"b", None, b"d"]


def test_errors_are_wire_errors(redis_url):
    import redis

    url, prefix = redis_url
    redis.Redis.from_url(url).set(prefix, "not a stream")
    with connect(url) as wire:
        with pytest.raises(WireError, match="WRONGTYPE"):
            wire.xrange(prefix, "-", "+", 10)
        with pytest.raises(WireError, match="WRONGTYPE"):
            wire.xadd_many([prefix, f"{prefix}:ok"], [b"1", b"2"])
        assert wire.xrange(f"{prefix}:ok", "-", "+", 10)[1] == [b"2"]  # the rest was still added
        assert wire.call("PING") == b"PONG"


def test_unreachable_and_auth():
    import redis

    from tests.servers import RedisServer, free_port

    with pytest.raises(WireError, match="cannot reach Redis at 127.0.0.1"):
        RedisWire("127.0.0.1", free_port()).connect()
    with RedisServer(appendonly=False) as server:
        redis.Redis(port=server.port).config_set("requirepass", "pw1")
        with RedisWire("127.0.0.1", server.port, db=3, password="pw1") as wire:
            wire.xadd_many(["k"], [b"v"])
        assert redis.Redis(port=server.port, db=3, password="pw1").xlen("k") == 1
        with pytest.raises(WireError, match="WRONGPASS|invalid"):
            RedisWire("127.0.0.1", server.port, password="nope").connect()


def test_parse_general_replies():
    assert parse(bytearray(b"+OK\r\n")) == (b"OK", 5)
    assert parse(bytearray(b"$-1\r\n")) == (None, 5)
    error, _ = parse(bytearray(b"-ERR bad\r\n"))
    assert isinstance(error, WireError) and str(error) == "ERR bad"
    with pytest.raises(redis_wire._Incomplete):
        parse(bytearray(b"*2\r\n$3\r\nab"))
