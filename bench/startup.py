"""Start-up with and without the class archive (``speedlayer warm-up``): what a bounded run costs.

    .venv/bin/python bench/startup.py              # 5 rounds
    .venv/bin/python bench/startup.py --rounds 3

Each round runs the same bounded fleet job from the CLI twice, once with the class archive and once
without (the archive is moved aside), alternating which goes first, and times the whole process,
Python's start and Spark's included. It also times a bare session and its first query, the
start-up alone. Prints the medians and their ratio; writes ``bench/results/startup.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speedlayer.runtime.class_archive import archive_path, write_class_archive

ROOT = Path(__file__).resolve().parent.parent
RUN = ["run", "fleet", "--max-events", "20000", "--no-live", "--spark-ui", "off",
       "--source", "generator://?rate=20000&vehicles=500&seed=3"]
SESSION = ("from speedlayer.runtime.session import build_session; "
           "build_session('local[2]', {'spark.ui.enabled': 'false'}).range(10).groupBy().count().collect()")


def timed(command: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    return time.monotonic() - started


def one(with_archive: bool, archive: Path, aside: Path, work: Path) -> tuple[float, float]:
    if not with_archive:
        shutil.move(archive, aside)
    try:
        shutil.rmtree(work / "state", ignore_errors=True)
        run = timed([sys.executable, "-m", "speedlayer", *RUN, "--state-dir", str(work / "state")])
        session = timed([sys.executable, "-c", SESSION])
    finally:
        if not with_archive:
            shutil.move(aside, archive)
    return run, session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    archive = write_class_archive()
    times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(args.rounds):
            order = ("with", "without") if round_ % 2 == 0 else ("without", "with")
            for which in order:
                times[which].append(one(which == "with", archive, Path(work) / "aside.jsa", Path(work)))
                print(f"round {round_ + 1} {which:7}: run {times[which][-1][0]:.1f}s, "
                      f"session + first query {times[which][-1][1]:.1f}s", flush=True)
    medians = {which: [statistics.median(t[i] for t in runs) for i in (0, 1)] for which, runs in times.items()}
    result = {"rounds": args.rounds, "run": RUN, "archive": str(archive_path()),
              "archive_mib": round(archive.stat().st_size / 2**20), "times_s": times,
              "median_run_s": {w: m[0] for w, m in medians.items()},
              "median_session_s": {w: m[1] for w, m in medians.items()},
              "run_ratio": medians["with"][0] / medians["without"][0],
              "session_ratio": medians["with"][1] / medians["without"][1]}
    out = ROOT / "bench" / "results" / "startup.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"bounded fleet run: {medians['with'][0]:.1f}s with the archive, {medians['without'][0]:.1f}s without "
          f"({result['run_ratio']:.2f}x); session + first query: {medians['with'][1]:.1f}s against "
          f"{medians['without'][1]:.1f}s ({result['session_ratio']:.2f}x); {out}")


if __name__ == "__main__":
    main()
