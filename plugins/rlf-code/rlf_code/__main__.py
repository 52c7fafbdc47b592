"""``python -m rlf_code``: the ``rlf-code`` command."""

from rlf_code.cli import main

raise SystemExit(main())
