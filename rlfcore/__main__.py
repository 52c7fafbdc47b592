"""``python -m rlfcore``: the same as the ``rlf`` command."""

from rlfcore.cli import main

main()
