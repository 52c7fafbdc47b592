"""Example MCP servers, each runnable with ``python -m rlf_mcp.servers.<name>`` (stdio; ``--http PORT``)."""
