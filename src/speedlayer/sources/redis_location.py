"""Where Redis streams live: host, port, database, credentials and stream keys, parsed from a URI.

Shared by the Redis Streams source and ``speedlayer produce``. Messages name ``host:port`` only,
never the password.
"""

from __future__ import annotations

from dataclasses import dataclass

from speedlayer.errors import ConfigError, SourceError, SpeedlayerError
from speedlayer.uris import Uri

DEFAULT_PORT = 6379
INSTALL_HINT = "pip install 'speedlayer[redis]'"


def import_redis():
    """The redis-py module, or a ConfigError naming the install command."""
    try:
        import redis
    except ImportError:
        raise ConfigError(f"the Redis source and producer need redis-py: {INSTALL_HINT}") from None
    return redis


@dataclass(frozen=True)
class RedisLocation:
    """Where the streams live, parsed from ``redis://[user:password@]host:port/db?stream=...&shards=N``."""

    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    keys: tuple[str, ...]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_uri(cls, uri: Uri, stream: str, shards: int | None) -> "RedisLocation":
        """Keys ``<stream>:0`` … ``<stream>:<shards-1>``, or ``<stream>`` alone without shards.

        >>> RedisLocation.from_uri(parse_uri("redis://:pw@db:6380/2"), "v", 2).keys
        ('v:0', 'v:1')
        """
        db_text = uri.path.strip("/") or "0"
        if not db_text.isdigit():
            raise ConfigError(f"{uri.display}: the path is the Redis database number, "
                              "e.g. redis://localhost:6379/0?stream=vehicles")
        keys = tuple(f"{stream}:{i}" for i in range(shards)) if shards else (stream,)
        return cls(uri.host or "127.0.0.1", uri.port or DEFAULT_PORT, int(db_text), uri.username, uri.password, keys)

    def client(self):
        """A redis-py client (control plane: checks, XINFO, offsets)."""
        redis = import_redis()
        return redis.Redis(host=self.host, port=self.port, db=self.db, username=self.username, password=self.password,
                           decode_responses=True, socket_connect_timeout=5, socket_timeout=60, protocol=2)

    def wire(self):
        """A raw connection for the data path (see ``speedlayer.redis_wire``)."""
        from speedlayer.redis_wire import RedisWire

        return RedisWire(self.host, self.port, self.db, self.username, self.password)

    def reach(self, error: type[SpeedlayerError] = SourceError):
        """A connected client; ``error`` (one line, no password) when Redis cannot be reached.

        >>> RedisLocation("127.0.0.1", 6379, 0, None, None, ("vehicles",)).reach().ping()  # doctest: +SKIP
        True
        """
        redis = import_redis()
        client = self.client()
        try:
            client.ping()
        except redis.exceptions.AuthenticationError as exc:
            client.close()
            raise error(f"Redis at {self.address} refused the credentials ({_reason(exc)}): "
                        "fix user and password in the URI") from None
        except redis.exceptions.ResponseError as exc:
            client.close()
            raise error(f"Redis at {self.address} refused the connection ({_reason(exc)}): "
                        "check the URI's credentials and database number") from None
        except redis.exceptions.RedisError as exc:
            client.close()
            raise error(f"cannot reach Redis at {self.address}: {_reason(exc)}; start redis-server or fix the URI") from None
        return client


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.rstrip(".")
