"""Spark's Kafka connector (``spark-sql-kafka-0-10``): which one this PySpark needs, and whether a session has it.

It is not part of PySpark. A run that reads or writes ``kafka://`` gets it by itself: the runner adds
``spark.jars.packages`` (Spark's resolver looks in Maven's local repository, then Maven Central), and
the executors of a cluster fetch it from the driver. Where that cannot work (a cluster without
network) the jars are given with ``--conf spark.jars=...``, and then nothing is added
(``speedlayer.runtime.session.add_packages``).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from speedlayer.core.errors import EnvironmentProblem

#: the name Spark looks the connector up by (``format("kafka")``)
DATA_SOURCE = "kafka"
ARTIFACT = "spark-sql-kafka-0-10_2.13"


def connector_package() -> str:
    """The connector's Maven coordinates for the PySpark in use.

    >>> connector_package().startswith("org.apache.spark:spark-sql-kafka-0-10_2.13:4.")
    True
    """
    import pyspark

    return f"org.apache.spark:{ARTIFACT}:{pyspark.__version__}"


def connector_hint() -> str:
    """What to add to the command line for Spark's Kafka connector, for this PySpark version.

    >>> connector_hint()  # doctest: +ELLIPSIS
    '--conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:4... (fetched from Maven Central), or ...'
    """
    import pyspark

    v = pyspark.__version__
    return (f"--conf spark.jars.packages={connector_package()} (fetched from Maven Central), "
            f"or offline --conf spark.jars=DIR/{ARTIFACT}-{v}.jar,"
            f"DIR/spark-token-provider-kafka-0-10_2.13-{v}.jar,DIR/kafka-clients-VERSION.jar,DIR/commons-pool2-VERSION.jar")


def connector_present(spark: SparkSession) -> bool | None:
    """Whether the session finds Spark's Kafka connector, looked up as ``format("kafka")`` does; None if it cannot tell."""
    jvm = getattr(spark, "_jvm", None)  # a Spark Connect session has no JVM here
    if jvm is None:
        return None
    try:
        conf = spark._jsparkSession.sessionState().conf()
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(DATA_SOURCE, conf)
        return True
    except Exception as exc:  # noqa: BLE001 — Py4J wraps the JVM's exception
        text = str(exc)
        return False if ("DATA_SOURCE" in text or "Failed to find data source" in text) else None


def check_connector(spark: SparkSession) -> None:
    """Fail before any query starts when the session lacks Spark's Kafka connector, naming what to add."""
    if connector_present(spark) is False:
        raise EnvironmentProblem(f"Spark's Kafka connector is not in this Spark session: add {connector_hint()}")
