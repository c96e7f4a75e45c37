"""The command's two consoles: results to stdout, messages to stderr."""

from __future__ import annotations

import os
import sys

from rich.console import Console

err = Console(stderr=True, highlight=False)
# Piped into a file, rich would fold wide tables (bench, jobs) into 80 columns; COLUMNS still wins.
out = Console(highlight=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)
