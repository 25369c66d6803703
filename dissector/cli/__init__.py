"""The ``kafka-dissector`` command line: the click group in ``main``, one module per
command, shared helpers in ``common``."""
