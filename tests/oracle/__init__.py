"""The pure-Python stages (capture, tcp, framing, kafka_header, correlate, pipeline, rows),
kept as the test oracle of the native core and shipped in no path: tests compare the
core's rows and counters with theirs. Shipped modules never import this package
(``tests/test_layout.py`` checks)."""
