"""rlf-openenv: an OpenEnv environment server (``reset``/``step`` over its ``/ws`` WebSocket) inside rlf's loop.
The hooks are in :mod:`rlf_openenv.plugin`; rlf's process never imports openenv (it talks the wire protocol)."""

__version__ = "0.1.0"
