"""The ``kafka-dissector`` command line: the click group in ``app`` (``main``, the
console script ``dissector.cli:main``), one module per command, shared helpers in
``common``."""

from dissector.cli.app import main

__all__ = ["main"]
