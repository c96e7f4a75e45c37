"""Decode: raw source rows -> typed events and dead letters with a reason (``speedlayer.decode.validate``)."""

from speedlayer.decode.validate import Decoded, decode

__all__ = ["Decoded", "decode"]
