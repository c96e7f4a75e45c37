"""The bench's terminal table says why a cell did not keep up."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from speedlayer.bench.cell import Cell
from speedlayer.bench.report import cells_table


def _render(*cells: Cell) -> str:
    console = Console(width=250, record=True)
    console.print(cells_table({"cells": [dataclasses.asdict(c) for c in cells]}))
    return console.export_text()


def test_a_cell_that_fell_behind_says_so_and_did_not_keep_up():
    behind = Cell("windows", "processing:0s", 50_000, produced_rate=49_000.0, rows_measured=300, kept_up=False,
                  drained=False, fell_behind=True)
    slow = Cell("alerts", "processing:5s", 1_000, produced_rate=1_000.0, rows_measured=80, kept_up=False, drained=False)
    text = _render(behind, slow)
    lines = {line.split("│")[1].strip() + line.split("│")[2].strip(): line for line in text.splitlines() if "│" in line}
    assert "fell 10 s behind, stopped early" in lines["windowsprocessing:0s"]
    assert "│ no " in lines["windowsprocessing:0s"]
    assert "backlog left" in lines["alertsprocessing:5s"] and "fell" not in lines["alertsprocessing:5s"]
