"""rlf-verifiers: an installed Prime Intellect ``verifiers`` environment (0.4's taskset API) inside rlf's loop.
The hooks are in :mod:`rlf_verifiers.plugin`; this package imports nothing heavy (verifiers loads on first use)."""

__version__ = "0.1.0"
