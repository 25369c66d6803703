"""``python -m dissector.cli``: the ``kafka-dissector`` command."""

from dissector.cli import main

main()
