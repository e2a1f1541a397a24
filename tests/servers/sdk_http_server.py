"""An MCP server built with the official Python SDK (`mcp` 2.x), served over HTTP for ptc-mcp's tests.

Run with the venv from ci/test-deps.sh ($PTC_TEST_SDK_PYTHON):

    sdk_http_server.py --transport streamable-http   # stateless, JSON responses, at /mcp
    sdk_http_server.py --transport sse               # the legacy transport: /sse and /messages/?session_id=

It listens on 127.0.0.1 on a port the OS chooses and prints `PORT <n>` as its first line on stdout.
"""

import argparse
import asyncio
import socket

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("sdk-http-test", log_level="WARNING")


class Quote(BaseModel):
    symbol: str
    price: float


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def quote(symbol: str) -> Quote:
    """A structured result (the SDK derives an output schema from the model)."""
    return Quote(symbol=symbol.upper(), price=123.5)


class Row(BaseModel):
    id: int
    name: str


@server.tool()
def rows(n: int) -> list[Row]:
    """A list result: structured content plus one text block per element, as the SDK sends lists."""
    return [Row(id=i, name=f"row {i}") for i in range(n)]


@server.tool()
def report(n: int) -> dict:
    """A dict result: the SDK sends it as pretty-printed JSON text only."""
    return {"count": n, "names": [f"row {i}" for i in range(n)]}


@server.tool()
def fail(message: str) -> str:
    """Always fails: the SDK turns a ToolError into an isError result with its message."""
    raise ToolError(message)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("streamable-http", "sse"), required=True)
    options = parser.parse_args()
    if options.transport == "sse":
        app = server.sse_app()
    else:
        app = server.streamable_http_app(json_response=True, stateless_http=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
