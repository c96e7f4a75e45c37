"""A running job's Spark Connect endpoint: ad-hoc SQL and notebooks inside the job's own Spark application.

The job's session loads Spark Connect's server as a plugin (its jar ships in PySpark's wheel), bound
to loopback unless told otherwise, on a free port, and refuses every client without the run's token.
Ad-hoc queries run in the fair scheduler's ``default`` pool while the run's queries run in
``streams``, which weighs more, so a large scan cannot take every core from the stream.

The run writes where it listens and its token to ``<state dir>/sql-endpoint.json``, readable by its
owner only: ``speedlayer sql`` finds it there; a notebook attaches with the URL it prints.

>>> endpoint = SqlEndpoint.open("127.0.0.1", None)          # doctest: +SKIP
>>> build_session(conf={**endpoint.spark_conf(state_dir)})   # doctest: +SKIP
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.core.tables import sql_name

ENDPOINT_FILE = "sql-endpoint.json"
#: the thread-local property that names the fair-scheduler pool of the Spark jobs a thread submits
#: (a streaming query's thread takes the one its starter is in)
SCHEDULER_POOL = "spark.scheduler.pool"
#: the fair scheduler's pool of the run's own queries; ad-hoc queries take Spark's ``default``
STREAMS_POOL = "streams"
#: the dashboard's tap: a free core when the outputs' queries leave one, the last in line otherwise
DASHBOARD_POOL = "dashboard"
_POOLS = f"""<?xml version="1.0"?>
<allocations>
  <pool name="{STREAMS_POOL}"><schedulingMode>FIFO</schedulingMode><weight>4</weight><minShare>1</minShare></pool>
  <pool name="{DASHBOARD_POOL}"><schedulingMode>FIFO</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
  <pool name="default"><schedulingMode>FIFO</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost``, 127.0.0.0/8, ::1).

    >>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0")
    (True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _free_port(host: str, port: int = 0) -> int:
    """``port`` if it is free on ``host``, or a free one (``port`` 0); one line when neither can be had.

    >>> _free_port("127.0.0.1") > 0
    True
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if port and exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"--sql-port {port} is taken on {host}: give another, or leave --sql-port out "
                                  "(a free port is picked)") from None
            raise ConfigError(f"--sql-host {host}: cannot listen there ({exc.strerror}): give an address of "
                              "this machine") from None
        return s.getsockname()[1]


@dataclass
class SqlEndpoint:
    host: str
    #: the port given, or 0 until ``publish`` reads the free one Spark bound (a port picked here
    #: beforehand could be taken by another process before Spark binds it)
    port: int
    token: str

    @classmethod
    def open(cls, host: str, port: int | None) -> SqlEndpoint:
        """Where a run's endpoint will listen (``host`` and a given ``port`` checked free); a new token."""
        _free_port(host, port or 0)
        return cls(host, port or 0, secrets.token_urlsafe(24))

    @property
    def url(self) -> str:
        """The Spark Connect URL a client on this machine uses (``localhost`` where it listens there too:
        PySpark sends a token without TLS only to it); the token is not part of it."""
        here = is_loopback(self.host) or self.host in ("0.0.0.0", "::", "")
        return f"sc://{'localhost' if here else self.host}:{self.port}"

    def spark_conf(self, state_dir: Path, user_conf: dict[str, str]) -> dict[str, str]:
        """``user_conf`` with what serves the endpoint: Connect's plugin added to the user's plugins, its
        address and token, the fair scheduler with the pools (their file written into ``state_dir``);
        a setting the user gave wins (``spark.scheduler.mode=FIFO`` turns the pools off).

        >>> SqlEndpoint("127.0.0.1", 15002, "t").spark_conf(Path("st"), {})["spark.scheduler.mode"]  # doctest: +SKIP
        'FAIR'
        """
        pools = state_dir / "scheduler-pools.xml"
        pools.write_text(_POOLS)
        plugins = [p for p in user_conf.get("spark.plugins", "").split(",") if p]
        return {"spark.connect.grpc.binding.address": self.host,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.connect.authenticate.token": self.token,
                "spark.scheduler.mode": "FAIR",
                "spark.scheduler.allocation.file": str(pools),
                **user_conf,
                "spark.plugins": ",".join([*plugins, "org.apache.spark.sql.connect.SparkConnectPlugin"])}

    def publish(self, spark: Any, plan: Any) -> Path | None:
        """Once the run's queries run: each memory output as a global view (``global_temp.<output>``,
        what Connect's sessions share), and where it listens (the port Spark bound) with its token
        written for ``speedlayer sql``, readable by this user only. None when the session serves no
        Spark Connect (one made before the run, without the plugin: a run inside a test or a notebook)."""
        try:
            service = getattr(spark._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
            port = service.__getattr__("MODULE$").localPort()  # a Scala object: no static forwarder for it
        except Exception:  # noqa: BLE001 — no server was started in this session
            return None
        if port <= 0:
            return None
        self.port = port
        for qp in plan.queries:
            if qp.sink.scheme == "memory":
                spark.table(qp.name).createOrReplaceGlobalTempView(sql_name(qp.output.name))
        path = plan.state_dir / ENDPOINT_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump({"url": self.url, "host": self.host, "port": self.port, "token": self.token,
                       "pid": os.getpid()}, file)
        return path


def recorded_endpoint(state_dir: Path) -> dict[str, Any] | None:
    """The endpoint of the run alive in ``state_dir`` (its url and token), or None when no run serves one."""
    path = state_dir / ENDPOINT_FILE
    try:
        endpoint = json.loads(path.read_text())
        os.kill(int(endpoint["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return endpoint


def connect(endpoint: dict[str, Any]) -> Any:
    """A Spark Connect session of the recorded ``endpoint``; one line when it does not answer.

    >>> spark = connect(recorded_endpoint(Path("state/fleet")))  # doctest: +SKIP
    """
    from pyspark.sql import SparkSession

    try:
        spark = SparkSession.builder.remote(f"{endpoint['url']}/;token={endpoint['token']}").getOrCreate()
        spark.range(1).collect()
    except Exception as exc:  # noqa: BLE001 — gRPC's and Spark's errors, said in one line
        reason = " ".join(str(exc).split())[:200]
        raise ConfigError(f"the running job's SQL endpoint {endpoint['url']} did not answer ({reason}): is the run "
                          "still up? speedlayer status tells") from None
    return spark


def forget_endpoint(state_dir: Path) -> None:
    """Remove the endpoint's record once the run stops serving it."""
    (state_dir / ENDPOINT_FILE).unlink(missing_ok=True)
