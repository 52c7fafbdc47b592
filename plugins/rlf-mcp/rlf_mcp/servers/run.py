"""The command line the example servers share: stdio by default, ``--http PORT`` (streamable HTTP) or ``--sse PORT``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the transport options; servers add their own before parsing."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--http", type=int, metavar="PORT", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio"
    )
    p.add_argument(
        "--sse", type=int, metavar="PORT", help="serve the older SSE transport at http://HOST:PORT/sse instead"
    )
    p.add_argument("--host", default="127.0.0.1", help="address for --http (default: 127.0.0.1, this machine only)")
    return p


def serve(server: MCPServer, args: argparse.Namespace) -> None:
    """Run an ``MCPServer`` on the transport the arguments chose, until stdin closes or it is stopped."""
    if args.http is not None:
        server.run("streamable-http", host=args.host, port=args.http)
    elif args.sse is not None:
        server.run("sse", host=args.host, port=args.sse)
    else:
        server.run("stdio")
