"""Where Redis streams live: host, port, database, credentials and stream keys, parsed from a URI.

Shared by the Redis Streams source and ``speedlayer produce``. Messages name ``host:port`` only,
never the password.

Two kinds of redis-py client: ``client()`` for the control plane (checks, XINFO, offsets; str
replies) and ``data_client()`` for the data path (XRANGE on the executors, the producer's XADD;
bytes replies, parsed in C by hiredis when it is installed, as the ``redis`` extra does).
"""

from __future__ import annotations

from dataclasses import dataclass

from speedlayer.core.errors import ConfigError, SourceError, SpeedlayerError
from speedlayer.core.uris import Uri

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
    def from_uri(cls, uri: Uri, stream: str, shards: int | None) -> RedisLocation:
        """Keys ``<stream>:0`` … ``<stream>:<shards-1>``, or ``<stream>`` alone without shards.

        >>> from speedlayer.core.uris import parse_uri
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

    def data_client(self, error: type[SpeedlayerError] = SourceError):
        """A connected redis-py client for the data path; ``error`` (one line) when that fails.

        Bytes replies (no decoding), 1 MiB socket reads, and XRANGE replies left as hiredis
        returns them (``[[id, [field, value, ...]], ...]``): redis-py's callback would build a
        tuple and a dict per entry, which doubles the cost of a read. It connects now (commands
        and pipelines then reuse that connection). No retries: a resent XADD pipeline could add
        entries twice, and a failed read task fails its batch, as before.
        """
        redis = import_redis()
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis(host=self.host, port=self.port, db=self.db, username=self.username,
                             password=self.password, protocol=2, socket_connect_timeout=5, socket_timeout=60,
                             socket_read_size=1 << 20, retry=Retry(NoBackoff(), 0))
        client.set_response_callback("XRANGE", _as_is)
        pool = client.connection_pool
        try:
            pool.release(pool.get_connection())  # connect, AUTH, SELECT
        except redis.exceptions.RedisError as exc:
            client.close()
            raise self.failure(exc, error, connecting=True) from None
        return client

    def failure(self, exc: Exception, error: type[SpeedlayerError] = SourceError,
                connecting: bool = False) -> SpeedlayerError:
        """``error`` with a one-line message (no password) for a redis-py error on the data path.

        >>> loc = RedisLocation("db", 6379, 0, None, "pw", ("v",))
        >>> str(loc.failure(import_redis().exceptions.ConnectionError("Connection closed by server.")))
        'Redis at db:6379 closed the connection'
        """
        redis = import_redis()
        cause = exc.__context__
        if isinstance(exc, redis.exceptions.AuthenticationError):
            return error(f"Redis at {self.address} refused the credentials ({_reason(exc)}): "
                         "fix user and password in the URI")
        if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
            if str(exc) == SERVER_CLOSED:
                return error(f"Redis at {self.address} closed the connection")
            reason = (cause.strerror or str(cause)) if isinstance(cause, OSError) else _reason(exc)
            if connecting:
                return error(f"cannot reach Redis at {self.address}: {reason}; start redis-server or fix the URI")
            return error(f"connection to Redis at {self.address} failed: {reason}")
        return error(_reason(exc))  # an error reply: the server's text

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


#: redis-py's message when the server closed the connection (redis._parsers.socket)
SERVER_CLOSED = "Connection closed by server."


def _as_is(response, **options):
    return response


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.rstrip(".")
