"""``python -m dissector.cli``: the ``kafka-dissector`` command."""

from dissector.cli.main import main

main()
