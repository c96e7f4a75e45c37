"""The peers' own venvs, made on demand, and PyFlink with Flink's Kafka SQL connector for the Kafka latency bench.

    .venv/bin/python bench/peers/flink_env.py      # make it (or find it made) and say where it is

A peer pins its own dependencies (PyFlink: Beam, pandas, pyarrow...), so each lives in a venv of its
own under ``bench/.peers-venv/`` (``ensure_venv``), never in speedlayer's. The Kafka bench's PyFlink
is the newest release for which Maven Central has the Kafka SQL connector (``flink-kafka``, with the
connector jar beside it, checked against Maven's SHA-1). A second call finds both and fetches
nothing; a failed download ends in one line that says what to do.
"""

from __future__ import annotations

import hashlib
import http.client
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

#: the newest apache-flink with a cp311 wheel for which a Kafka SQL connector is published
FLINK_VERSION = "2.2.1"
#: flink-sql-connector-kafka made for Flink 2.2
CONNECTOR_VERSION = "5.0.0-2.2"
MAVEN = "https://repo1.maven.org/maven2"
PEERS_VENV = Path(__file__).resolve().parents[1] / ".peers-venv"
CACHE = PEERS_VENV / "flink-kafka"
REQUIREMENT = f"apache-flink=={FLINK_VERSION}"


@dataclass(frozen=True)
class PyFlinkEnv:
    """The venv's python and the connector jar."""

    python: Path
    connector_jar: Path


def ensure_pyflink(cache: Path = CACHE) -> PyFlinkEnv:
    """The PyFlink environment, made in ``cache`` if it is not there yet."""
    return PyFlinkEnv(ensure_venv(cache / "venv", [REQUIREMENT]), _ensure_jar(cache))


def ensure_venv(venv: Path, requirements: list[str]) -> Path:
    """The python of ``venv`` with ``requirements`` installed (exact pins), made once per set of pins."""
    python, marker, wanted = venv / "bin" / "python", venv / "installed.txt", "\n".join(requirements) + "\n"
    if marker.is_file() and marker.read_text() == wanted and python.exists():
        return python
    if not python.exists():
        _run([sys.executable, "-m", "venv", "--clear", str(venv)], f"could not make a venv in {venv}")
    _run([str(python), "-m", "pip", "install", "--quiet", *requirements],
         f"pip could not install {' '.join(requirements)} into {venv}; check that PyPI is reachable and run again")
    marker.write_text(wanted)
    return python


def _run(command: list[str], failure: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no output")
        raise SystemExit(f"flink_env: {failure} ({last.strip()})")


def _ensure_jar(cache: Path) -> Path:
    name = f"flink-sql-connector-kafka-{CONNECTOR_VERSION}.jar"
    jar = cache / name
    if jar.is_file():
        return jar
    url = f"{MAVEN}/org/apache/flink/flink-sql-connector-kafka/{CONNECTOR_VERSION}/{name}"
    body, expected = _fetch(url), _fetch(url + ".sha1").decode().split()[0]
    if hashlib.sha1(body).hexdigest() != expected:
        raise SystemExit(f"flink_env: {url} arrived with the wrong SHA-1; run again")
    cache.mkdir(parents=True, exist_ok=True)
    partial = jar.with_suffix(".part")
    partial.write_bytes(body)
    partial.replace(jar)
    return jar


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise SystemExit(f"flink_env: could not download {url} ({exc}); check that Maven Central is reachable "
                         "and run again") from None


def main() -> int:
    started = time.monotonic()
    env = ensure_pyflink()
    print(f"apache-flink {FLINK_VERSION}: {env.python}")
    print(f"flink-sql-connector-kafka {CONNECTOR_VERSION}: {env.connector_jar}")
    print(f"ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
