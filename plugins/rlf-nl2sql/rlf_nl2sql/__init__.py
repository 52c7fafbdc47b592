"""rlf-nl2sql: NL2SQL on SQLite for rlf. A read-only ``sql`` tool during rollouts, and a reward by
execution match of the final SQL against the gold SQL (Spider/BIRD execution accuracy).

The hooks are in :mod:`rlf_nl2sql.plugin`; this package imports nothing heavy.
"""

__version__ = "0.1.0"
