"""bench/targets.py measures `make run` as the Makefile starts it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import targets  # noqa: E402

RECIPE = """\
## run: the flagship job
run: $(VENV)/.installed
\t$(VENV)/bin/speedlayer run fleet --source 'generator://?rate=9&max_per_batch=3' \\
\t\t--dedup exact --dashboard --trigger processing:1s $(ARGS)

## servers: next target
servers:
\techo other --source 'x'
"""


def test_make_run_line_reads_the_recipe(tmp_path):
    makefile = tmp_path / "Makefile"
    makefile.write_text(RECIPE)
    assert targets.make_run_line(makefile) == ("generator://?rate=9&max_per_batch=3",
                                               ("--dedup", "exact", "--trigger", "processing:1s"))


def test_the_benchmarks_use_the_makefiles_run_line():
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert f"--source '{targets.MAKE_RUN_SOURCE}'" in recipe
    assert " ".join(targets.MAKE_RUN_OPTIONS) in recipe and "--dashboard" not in targets.MAKE_RUN_OPTIONS
