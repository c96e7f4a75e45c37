"""``speedlayer warm-up``: write the class archive Spark's JVM starts from (``runtime.class_archive``)."""

from __future__ import annotations

import typer

from speedlayer.cli.console import err, out


def warm_up_command(
    force: bool = typer.Option(False, "--force", help="write the archive again even if there is one"),
) -> None:
    """Make Spark start faster here: record the classes a run loads and archive them (once, about a minute)."""
    from speedlayer.runtime.class_archive import archive_path, write_class_archive

    path = archive_path()
    if path is not None and path.is_file() and not force:
        out.print(f"class archive up to date: {path}", soft_wrap=True, markup=False)
        return
    err.print("recording the classes a bounded fleet run loads, then archiving them (about a minute, once)",
              soft_wrap=True)
    path = write_class_archive(force=force)
    out.print(f"class archive written: {path} ({path.stat().st_size / 2**20:.0f} MiB); "
              "every Spark session speedlayer starts now maps it", soft_wrap=True, markup=False)
