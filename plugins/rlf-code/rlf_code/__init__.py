"""rlf-code: a Python (and bash) interpreter in a confined sandbox per trajectory, and rewards from
running tests in a fresh one. The hooks are in :mod:`rlf_code.plugin`; this package imports nothing heavy."""

__version__ = "0.1.0"
