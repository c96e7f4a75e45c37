"""What ``speedlayer bench --kafka`` prints of its cells: a round column and line only when cells repeat."""

from rich.console import Console

from speedlayer.bench.kafka_command import cells_table
from speedlayer.bench.kafka_latency import KafkaCell, cell_line


def measured(p99: float, round_: int = 1) -> KafkaCell:
    return KafkaCell("speedlayer", "realtime:1min", 1000, measured=40_000, p50_ms=1.0, p99_ms=p99, p999_ms=50.0,
                     max_ms=90.0, round=round_)


def table_text(cells: list[KafkaCell]) -> str:
    console = Console(width=160, record=True)
    console.print(cells_table(cells))
    return console.export_text()


def test_repeated_cells_are_told_apart_by_their_round():
    text = table_text([measured(3.0, 1), measured(40.0, 2)])
    header, rows = text.splitlines()[2], [line for line in text.splitlines() if "realtime:1min" in line]
    assert "round" in header
    assert [row.split("│")[3].strip() for row in rows] == ["1", "2"]
    assert [row.split("│")[5].strip() for row in rows] == ["3", "40"]
    assert cell_line(measured(40.0, 2)).startswith("speedlayer realtime:1min 1,000/s (round 2): p50 1 ms, p99 40 ms")


def test_a_single_round_prints_no_round():
    assert "round" not in table_text([measured(3.0)]).lower()
    assert "round" not in cell_line(measured(3.0))
