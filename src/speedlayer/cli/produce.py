"""``speedlayer produce``: publish the generator's events to Redis Streams, files or Kafka."""

from __future__ import annotations

import typer

from speedlayer.cli.console import err, out
from speedlayer.core.errors import ConfigError


def produce_command(
    to: str = typer.Option(..., "--to",
                           help="redis://host:6379/0?stream=vehicles&shards=4 | files:///landing | kafka://host:9092/topic"),
    rate: int | None = typer.Option(None, "--rate",
                                    help="events per second, 0 = as fast as possible (default: the generator's rate)"),
    max_events: int | None = typer.Option(None, "--max-events", help="publish N events, then exit (default: until Ctrl-C)"),
    generator: str = typer.Option("generator://", "--generator",
                                  help="generator options, e.g. 'generator://?seed=7&vehicles=500'"),
    seed: int | None = typer.Option(None, "--seed", help="generator seed (wins over --generator's)"),
    kind: str | None = typer.Option(None, "--kind", help="vehicles | actions | transactions | rides | a registered kind "
                                                           "(wins over --generator's)"),
    start: str | None = typer.Option(None, "--start", help="event-time origin, ISO-8601 or epoch ms (default: now)"),
    from_event: int = typer.Option(0, "--from-event", help="first event number n (to continue an earlier run)"),
    chunk: int = typer.Option(50_000, "--chunk", help="events computed per Spark job"),
    master: str = typer.Option("local[*]", "--master", help="Spark master that computes the events"),
    progress: bool | None = typer.Option(None, "--progress/--no-progress", help="progress bar (default: on a terminal)"),
) -> None:
    """Publish the generator's events to Redis Streams, a landing directory or Kafka."""
    from pydantic import ValidationError

    from speedlayer.producers.produce import ProduceSettings, plan_produce

    try:
        settings = ProduceSettings(to=to, generator=generator, rate=rate, max_events=max_events, seed=seed, kind=kind,
                                   start=start, from_event=from_event, chunk=chunk, master=master)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    plan = plan_produce(settings)
    plan.destination.check()
    from speedlayer.cli.producing import execute_produce

    execute_produce(plan, settings, err.is_terminal if progress is None else progress, out, err)
