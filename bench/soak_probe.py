"""One sample of a running ``speedlayer run``: its processes' memory, the driver JVM's heap, /metrics, disk.

Reads /proc (Linux), runs ``jstat -gc`` once per sample against the driver JVM, and scrapes the
run's ``--metrics-port``. Every figure is in MB, bytes, rows or seconds as its name says.

    probe = Probe(cli_pid, metrics_url, state_dir / "checkpoints", {"windows": out / "windows"})
    sample = probe.sample()
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

from speedlayer.core.sizes import tree_size
from speedlayer.runtime.processes import rss_bytes, run_processes, status_fields


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MB; None once it is gone."""
    size = rss_bytes(pid)
    return None if size is None else size / 2**20


def memory_kinds(pid: int) -> dict[str, float]:
    """A process's resident memory by kind, in MB, and its thread count, from ``/proc/<pid>/status``:
    anonymous (the heaps of the JVM and of native code), file-backed (mapped jars, libraries, state
    files) and shared; {} once it is gone.

    >>> import os
    >>> sorted(memory_kinds(os.getpid()))
    ['rss_anon_mb', 'rss_file_mb', 'rss_shmem_mb', 'threads']
    """
    fields = status_fields(pid)
    found: dict[str, float] = {f"rss_{name[3:].lower()}_mb": fields[name] / 1024
                               for name in ("RssAnon", "RssFile", "RssShmem") if name in fields}
    return {**found, "threads": fields["Threads"]} if "Threads" in fields else found


def mapping_kinds(pid: int) -> dict[str, float]:
    """A JVM's resident memory by what its mappings hold, in MB (``/proc/<pid>/smaps``): ``java heap``
    (its largest writable anonymous mapping: the committed heap is one piece), ``code cache`` (anonymous and
    executable: the JIT's code), ``malloc main`` (the ``[heap]`` of brk), ``native other`` (every
    other anonymous mapping: malloc's arenas, thread stacks, native libraries' own memory such as
    RocksDB's) and ``files`` (mapped jars and libraries); {} once it is gone.

    >>> import os
    >>> sorted(mapping_kinds(os.getpid()))
    ['code cache', 'files', 'java heap', 'malloc main', 'native other']
    """
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return {}
    mappings, head = [], None
    for line in text.splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            head = fields
        elif fields and fields[0] == "Rss:" and head is not None:
            mappings.append((head, int(fields[1]) / 1024))
    writable = [(h, mb) for h, mb in mappings if len(h) < 6 and h[1].startswith("rw")]  # not a mere reservation
    largest = max(writable, key=lambda m: _size(m[0]), default=(None, 0.0))[0]
    kinds = dict.fromkeys(["java heap", "code cache", "malloc main", "native other", "files"], 0.0)
    for h, mb in mappings:
        kind = ("malloc main" if h[5:] == ["[heap]"] else "files" if h[5:] and h[5].startswith("/")
                else "java heap" if h is largest else "code cache" if "x" in h[1] else "native other")
        kinds[kind] += mb
    return kinds


def _size(head: list[str]) -> int:
    start, end = (int(x, 16) for x in head[0].split("-"))
    return end - start


def parse_jstat_gc(text: str) -> dict[str, float | None]:
    """``jstat -gc`` output (KB; a header line and a value line) as MB of heap used and committed,
    the old generation used, and metaspace (non-heap) used and committed; plus the GC counts.

    >>> out = ("S0C S1C S0U S1U EC EU OC OU MC MU CCSC CCSU YGC YGCT FGC FGCT CGC CGCT GCT\\n"
    ...        "0.0 1024.0 0.0 1024.0 4096.0 2048.0 8192.0 4096.0 2048.0 1024.0 512.0 256.0 7 0.1 0 0.0 - - 0.1\\n")
    >>> parse_jstat_gc(out)["heap_used_mb"], parse_jstat_gc(out)["heap_committed_mb"], parse_jstat_gc(out)["young_gcs"]
    (7.0, 13.0, 7)
    """
    header, values = (line.split() for line in text.strip().splitlines()[-2:])
    kb = {k: (None if v == "-" else float(v)) for k, v in zip(header, values)}

    def mb(*names: str) -> float:
        return sum(kb[n] or 0.0 for n in names) / 1024

    return {"heap_used_mb": mb("S0U", "S1U", "EU", "OU"), "heap_committed_mb": mb("S0C", "S1C", "EC", "OC"),
            "old_used_mb": mb("OU"), "metaspace_used_mb": mb("MU"), "metaspace_committed_mb": mb("MC"),
            "young_gcs": int(kb["YGC"] or 0), "full_gcs": int(kb["FGC"] or 0)}


def jvm_heap(pid: int) -> dict[str, float | None]:
    """The JVM's heap and metaspace now, from ``jstat -gc`` (a JVM of its own: ~0.3 s of CPU); {} when it fails."""
    try:
        done = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=30)
        return parse_jstat_gc(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError):
        return {}


def parse_metrics(text: str) -> dict[str, dict]:
    """Per query, from Prometheus text: state rows and memory per operator, batches, the batch-duration
    histogram's sum and count, input rows, and the latency since ingest per percentile.

    >>> text = ('speedlayer_state_rows{speedlayer_job="fleet",query="fleet_windows",operator="0:dedupe"} 12.0\\n'
    ...         'speedlayer_latency_seconds{speedlayer_job="fleet",query="fleet_windows",since="ingest",percentile="p99"} 1.5\\n')
    >>> parse_metrics(text)["fleet_windows"]["state_rows"], parse_metrics(text)["fleet_windows"]["latency_ingest_s"]
    ({'0:dedupe': 12.0}, {'p99': 1.5})
    """
    from prometheus_client.parser import text_string_to_metric_families

    queries: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            query = s.labels.get("query")
            if query is None:
                continue
            q = queries.setdefault(query, {"state_rows": {}, "state_memory_bytes": {}, "latency_ingest_s": {}})
            name = s.name.removeprefix("speedlayer_")
            if name in ("state_rows", "state_memory_bytes"):
                q[name][s.labels["operator"]] = s.value
            elif name == "latency_seconds" and s.labels.get("since") == "ingest":
                q["latency_ingest_s"][s.labels["percentile"]] = s.value
            elif name in ("batch_duration_seconds_sum", "batch_duration_seconds_count", "batches_total",
                          "input_rows_total"):
                q[name.removesuffix("_total")] = s.value
    return queries


def scrape(url: str) -> dict[str, dict] | None:
    """``parse_metrics`` of the run's /metrics; None while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return parse_metrics(response.read().decode())
    except OSError:
        return None


class Probe:
    """Takes samples of one run: the CLI process ``cli_pid``, its /metrics, its checkpoints and outputs."""

    def __init__(self, cli_pid: int, metrics_url: str, checkpoints: Path, outputs: dict[str, Path]):
        self.cli_pid, self.metrics_url, self.checkpoints, self.outputs = cli_pid, metrics_url, checkpoints, outputs

    def allocator(self) -> str | None:
        """The driver JVM's malloc: ``jemalloc`` when its library is mapped, else ``system``; None without a JVM."""
        jvm = run_processes(self.cli_pid)["jvm"]
        try:
            maps = Path(f"/proc/{jvm}/maps").read_text()  # no JVM: /proc/None/maps, an OSError
        except OSError:
            return None
        return "jemalloc" if "libjemalloc" in maps else "system"

    def sample(self) -> dict:
        procs = run_processes(self.cli_pid)
        worker_rss = [rss_mb(p) for p in procs["workers"]]
        return {
            "rss_mb": {"driver_jvm": rss_mb(procs["jvm"]) if procs["jvm"] else None,
                       "python_workers": sum(r for r in worker_rss if r is not None),
                       "cli_python": rss_mb(self.cli_pid)},
            "driver_jvm": memory_kinds(procs["jvm"]) if procs["jvm"] else {},
            "driver_mappings": mapping_kinds(procs["jvm"]) if procs["jvm"] else {},
            "python_workers": len(procs["workers"]),
            "jvm": jvm_heap(procs["jvm"]) if procs["jvm"] else {},
            "queries": scrape(self.metrics_url) or {},
            "disk_mb": {"checkpoints": tree_size(self.checkpoints) / 1e6,
                        **{f"output {name}": tree_size(path) / 1e6 for name, path in self.outputs.items()}},
        }
