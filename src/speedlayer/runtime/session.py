"""The SparkSession factory: Java check, sane streaming defaults, Spark's log sent to a file."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from speedlayer.core import faults
from speedlayer.core.errors import ConfigError, EnvironmentProblem
from speedlayer.core.parallelism import machine_partitions
from speedlayer.runtime.allocator import jvm_allocator
from speedlayer.runtime.bounds import DEFAULT_DRIVER_MEMORY, DRIVER_JAVA_OPTIONS, DRIVER_MEMORY, bounds_conf
from speedlayer.runtime.class_archive import class_archive_options, java_binary
from speedlayer.runtime.jvm_output import jvm_stderr_filtered
from speedlayer.runtime.package_lock import packages_fetched_one_at_a_time
from speedlayer.runtime.shipping import ship_plan

JAVA_HINT = "install it with 'sudo apt-get install openjdk-17-jre-headless' (or set JAVA_HOME to a JDK 17+)"

SPARK_REDACTION_REGEX = ("(?i)secret|password|passwd|token|jaas|credential|access[._]?key|account[._]?key|"
                         "private[._]?key|ssl[._]key|keystore[._]key|api[._]?key|[.]sas[.]")

CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"

#: Defaults chosen for streaming on a small machine; every one can be overridden with --conf.
DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.adaptive.enabled": "false",  # AQE does not apply to streaming and adds planning time
    # Dynamic partition pruning and runtime bloom filters trace a join key back to its source,
    # substituting every alias on the way: through the generator's chain of projections that grows
    # exponentially, and planning the ride-matching join ran the driver out of memory. Neither
    # helps here: speedlayer reads no partitioned tables, and a stream's join runs no such filter.
    "spark.sql.optimizer.dynamicPartitionPruning.enabled": "false",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
    DRIVER_MEMORY: DEFAULT_DRIVER_MEMORY,
    # Python workers (data sources, sinks) give the JVM 15 s by default to accept their connection;
    # on a saturated machine that fails a query with "Python worker failed to connect back".
    "spark.python.authenticate.socketTimeout": "120s",
    # What Spark hides in its log, UI and event log: its default (secret|password|token|access.key)
    # misses the secret settings speedlayer masks (uris.is_secret_option), e.g. fs.azure.account.key.*.
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
    # One Python worker serves task after task (Spark's default, kept on purpose): a new worker per
    # task costs an interpreter start and speedlayer's imports on every batch.
    "spark.python.worker.reuse": "true",
    # PySpark 4 records the Python call site of every Column and DataFrame call on the JVM (for the
    # "DataFrame query context" of an error): five round trips to the JVM per call while queries are built.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Checkpoints through Hadoop's FileSystem API, not its FileContext (Spark's default): without Hadoop's
    # native library, FileContext's rename runs `readlink` in a child process for each side, twice per
    # offset, commit and state file. A run's state directory is always a local path (a mount on a
    # cluster), where a rename is atomic, and the run lock keeps a second writer out.
    "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
    # RocksDB's memory bounded for all state stores together, and the batches a checkpoint keeps
    # (docs/reliability.md, "Long runs"); a run's --max-state-memory and --retain-batches set them.
    **bounds_conf(),
}

#: Spark's generated code for wide projections (decode, the generator) can exceed HotSpot's
#: 8,000-byte limit for JIT compilation and then runs interpreted; lifting the limit cut the fleet
#: job's overhead from +43.5% to +20.9% (docs/benchmarks.md). Driver and executors both get it,
#: in front of whatever Java options the user passes.
JIT_FLAGS = "-XX:-DontCompileHugeMethods"


def java_version() -> int | None:
    """Major version of the Java that Spark will use, or None when there is none."""
    java = java_binary()
    if java is None:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def check_java() -> None:
    """Raise EnvironmentProblem with the install command when Java 17+ is missing."""
    version = java_version()
    if version is None:
        raise EnvironmentProblem(f"Java 17 or newer is needed to run Spark and none was found: {JAVA_HINT}")
    if version < 17:
        raise EnvironmentProblem(f"Java {version} found but Spark 4 needs Java 17 or newer: {JAVA_HINT}")


LOOPBACK = "127.0.0.1"


def is_local(master: str) -> bool:
    return master.strip().lower().startswith("local")


def network_conf(master: str, spark_ui: str = "local") -> tuple[dict[str, str], dict[str, str]]:
    """Spark settings and environment that keep a local session on loopback, like every server speedlayer starts.

    Spark binds its UI to ``SPARK_LOCAL_IP``, else to every interface, and the driver's RPC and
    block-manager ports to the machine's outward address unless the driver's addresses are set.
    A cluster's executors must reach the driver, so there only the UI is switched (off, or kill links off).

    >>> network_conf("local[2]")[0]["spark.driver.bindAddress"], network_conf("local[2]")[1]
    ('127.0.0.1', {'SPARK_LOCAL_IP': '127.0.0.1'})
    """
    conf = {"spark.ui.killEnabled": "false"}
    env: dict[str, str] = {}
    if spark_ui == "off":
        conf["spark.ui.enabled"] = "false"
    if is_local(master):
        conf.update({"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK})
        if spark_ui != "open":
            env["SPARK_LOCAL_IP"] = LOOPBACK
    return conf, env


def exposure_note(master: str, spark_ui: str = "local") -> str | None:
    """What a session on a cluster opens to the network, in one line (None in local mode: nothing)."""
    if is_local(master):
        return None if spark_ui != "open" else "the Spark UI listens on every interface (--spark-ui open), kill links off"
    ui = ("the Spark UI is off" if spark_ui == "off"
          else "the Spark UI listens on every interface (port 4040 or the next free one), kill links off")
    return (f"--master {master}: executors must reach this driver, so its RPC and block-manager ports listen on this "
            f"machine's address (choose it with --conf spark.driver.host / spark.driver.bindAddress); {ui}")


def standalone_masters(master: str) -> list[tuple[str, int]]:
    """(host, port) of each master a ``spark://`` URL names (several for standby masters), else none.

    >>> standalone_masters("spark://a:7077,b:7078"), standalone_masters("yarn")
    ([('a', 7077), ('b', 7078)], [])
    """
    if not master.startswith("spark://"):
        return []
    found = []
    for part in master[len("spark://"):].split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--master {master}: give spark://HOST:PORT (e.g. spark://10.0.0.1:7077)")
        found.append((host, int(port)))
    return found


def check_master(master: str, timeout_s: float = 3.0) -> None:
    """Refuse a ``spark://`` master where nothing answers, at once: Spark would retry for a minute, then fail
    with a stack trace."""
    masters = standalone_masters(master)
    for host, port in masters:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError:
            continue
    if masters:
        raise EnvironmentProblem(f"no Spark master answers at {master[len('spark://'):]}: start it "
                                 "(docs/cluster.md, Standalone) or fix --master")


def add_packages(conf: Mapping[str, str], packages: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``conf`` with ``packages`` (Maven coordinates) added to ``spark.jars.packages``, and the ones added.

    A package whose artifact ``conf`` already brings, as a package of any version or as a jar in
    ``spark.jars`` (an offline cluster's way), is left out.

    >>> add_packages({"spark.jars": "/jars/spark-sql-kafka-0-10_2.13-4.2.0.jar"},
    ...              ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"])
    ({'spark.jars': '/jars/spark-sql-kafka-0-10_2.13-4.2.0.jar'}, [])
    >>> add_packages({"spark.jars.packages": "a:b:1"}, ["g:c:2"])
    ({'spark.jars.packages': 'a:b:1,g:c:2'}, ['g:c:2'])
    """
    conf = dict(conf)
    given = [p.strip() for p in conf.get("spark.jars.packages", "").split(",") if p.strip()]
    jars = conf.get("spark.jars", "")
    added = []
    for package in packages:
        group, artifact = package.split(":")[:2]
        if any(p.split(":")[:2] == [group, artifact] for p in given) or f"{artifact}-" in jars:
            continue
        given.append(package)
        added.append(package)
    if added:
        conf["spark.jars.packages"] = ",".join(given)
    return conf, added


#: settings that hold a comma-separated list, to which a connector's entries are added
LIST_SETTINGS = ("spark.sql.extensions",)


def add_connector_conf(conf: Mapping[str, str], needed: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the settings connectors need (``Sink.spark_conf``): a list setting gets the entries it
    lacks, any other is set where the user did not set it.

    >>> add_connector_conf({"spark.sql.extensions": "a.Ext"}, {"spark.sql.extensions": "b.Ext", "k": "v"})
    {'spark.sql.extensions': 'a.Ext,b.Ext', 'k': 'v'}
    """
    conf = dict(conf)
    for key, value in needed.items():
        if key in LIST_SETTINGS and conf.get(key):
            have = [v.strip() for v in conf[key].split(",") if v.strip()]
            conf[key] = ",".join(have + [v for v in value.split(",") if v not in have])
        else:
            conf.setdefault(key, value)
    return conf


def _unresolved(packages: list[str]) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"Spark could not fetch {', '.join(packages)} (spark.jars.packages: no repository it tried had it, or none "
        "answered; its resolver's report is in Spark's log): without network "
        "give the jars with --conf spark.jars=PATH,...; behind a mirror, --conf spark.jars.repositories=URL; where "
        "Maven's local repository (~/.m2/repository) holds a dependency's pom without its jar, Spark looks no "
        "further: delete that folder")


def _gateway_failed(exc: Exception) -> bool:
    """Whether Spark's JVM did not start, as when ``spark-submit`` cannot resolve ``spark.jars.packages``."""
    return "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway process exited" in str(exc)


def build_session(
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "speedlayer",
    log_file: Path | None = None,
    spark_ui: str = "local",
    ship: str = "auto",
    announce: Callable[[str], None] | None = None,
    packages: Sequence[str] = (),
    connector_conf: Mapping[str, str] | None = None,
):
    """A SparkSession with speedlayer's defaults under ``conf``; in local mode it listens on loopback only.

    On a cluster master, ``ship`` says what executors get (``speedlayer.runtime.shipping``): ``auto`` packs
    speedlayer and its packages, ``none`` nothing, else the path of an archive. ``packages`` are the
    Maven coordinates the run's connectors need (``add_packages``); Spark fetches them and gives them
    to executors too; ``connector_conf`` are the settings they need (``add_connector_conf``).
    ``announce`` is given the one line that says what is shipped or added.

    >>> spark = build_session("local[2]", {"spark.ui.enabled": "false"})  # doctest: +SKIP
    """
    check_java()
    check_master(master)
    conf, added = add_packages(add_connector_conf(conf or {}, connector_conf or {}), packages)
    if announce and added:
        announce(f"adding {', '.join(added)} to the Spark session (spark.jars.packages; "
                 "Maven's local repository first, then Maven Central)")
    if is_local(master):
        # Python workers start this interpreter, which has speedlayer's dependencies.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    else:
        shipped = ship_plan(conf, ship)
        os.environ.update(shipped.env)  # read when the JVM and its Python workers start
        conf = {**shipped.conf, **{k: v for k, v in conf.items() if k not in shipped.conf}, **faults.executor_env()}
        if announce and shipped.note:
            announce(shipped.note)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    log_file = log_file or Path(os.environ.get("TMPDIR", "/tmp")) / "speedlayer-spark.log"
    settings = _session_settings(master, conf, log_file, spark_ui)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        # the JVM, if it starts now, prints through the filter
        with packages_fetched_one_at_a_time(settings), jvm_stderr_filtered(log_file), jvm_allocator():
            spark = builder.getOrCreate()
    except Exception as exc:
        if added and _gateway_failed(exc):
            raise _unresolved(added) from None
        raise
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _session_settings(master: str, conf: Mapping[str, str], log_file: Path, spark_ui: str) -> dict[str, str]:
    """speedlayer's defaults under ``conf``, the network's settings, and the JVMs' options (log, JIT, class archive)."""
    log_config = resources.files("speedlayer.data").joinpath("log4j2.properties")
    logging_opts = f"-Dlog4j2.configurationFile=file:{log_config} -Dspeedlayer.log.file={log_file}"
    network, env = network_conf(master, spark_ui)
    for name, value in env.items():
        os.environ.setdefault(name, value)  # read by the JVM when it starts
    # each shuffle partition carries its own state store: few on a small machine
    settings = {**DEFAULT_CONF, "spark.sql.shuffle.partitions": str(machine_partitions()), **network, **conf}
    for key, ours in ((DRIVER_JAVA_OPTIONS, f"{logging_opts} {JIT_FLAGS} {class_archive_options()}"),
                      ("spark.executor.extraJavaOptions", JIT_FLAGS)):
        settings[key] = f"{ours} {settings.get(key, '')}".strip()
    return settings


def tool_session(command: str, cores: int = 1, packages: Sequence[str] = (),
                 connector_conf: Mapping[str, str] | None = None):
    """A short local Spark session for a command that reads a state dir: no UI, its log in the temp dir.

    >>> spark = tool_session("status")  # doctest: +SKIP
    """
    import tempfile

    return build_session(f"local[{cores}]", {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": str(cores)},
                         app_name=f"speedlayer-{command}", packages=packages, connector_conf=connector_conf,
                         log_file=Path(tempfile.gettempdir()) / f"speedlayer-{command}-spark.log")
