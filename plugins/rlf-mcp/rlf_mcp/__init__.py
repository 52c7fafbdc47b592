"""rlf plugin ``mcp``: the tools of MCP servers, configured by a standard ``mcpServers`` mapping.

Kept empty so the example servers (``python -m rlf_mcp.servers.calculator``) start without importing
rlfcore or the client side; the plugin's hooks are in :mod:`rlf_mcp.plugin`.
"""
