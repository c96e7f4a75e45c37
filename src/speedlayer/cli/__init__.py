"""The ``speedlayer`` command, one module per command (``speedlayer.cli.app`` assembles them)."""
