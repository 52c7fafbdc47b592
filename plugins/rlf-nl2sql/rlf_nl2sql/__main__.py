"""``python -m rlf_nl2sql``: the ``rlf-nl2sql`` command."""

from rlf_nl2sql.cli import main

raise SystemExit(main())
