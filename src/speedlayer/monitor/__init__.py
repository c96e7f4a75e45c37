"""Seeing what a stream does: progress tracking and the live terminal view."""
