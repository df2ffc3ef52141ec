"""The MCP server `benchmarks/mcp_tools.py` measures: one `echo` tool, over stdio or streamable HTTP.

python benchmarks/_mcp_echo.py               # stdio
python benchmarks/_mcp_echo.py --http PORT   # streamable HTTP on 127.0.0.1:PORT
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-echo", log_level="WARNING")


@server.tool()
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        import uvicorn

        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run()
