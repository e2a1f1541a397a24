"""Drive an MCP server over stdio or streamable HTTP with the official MCP Python SDK (`mcp` 2.x) and report
as JSON.

Run with the venv from ci/test-deps.sh ($PTC_TEST_SDK_PYTHON):

    sdk_client.py [--protocol VERSION|auto|legacy] [--code CODE] [--list-args JSON] -- COMMAND [ARGS...]
    sdk_client.py [--protocol ...] [--code CODE] [--list-args JSON] --url http://127.0.0.1:PORT/mcp [--header 'Name: value']

Starts COMMAND with the SDK's stdio transport (or connects to URL with its streamable HTTP client, sending
each --header with every request), connects in the chosen era, lists the tools, calls `list_callable_tools`
(with the --list-args object as its arguments, default {}), calls `execute_program` with CODE, and prints ONE
JSON object on stdout:

    {"negotiated_version": "2026-07-28", "lifecycle": "discover", "server_info": {...},
     "wire": ["server/discover@2026-07-28", "tools/list@2026-07-28", ...],
     "tools": [names], "callable": "<first text block>", "callable_extra": [more text blocks],
     "execute": {"seconds": 1.2, "is_error": false, "text": "...", "structured": {...},
                 "content": [{"type": "text"}, {"type": "image", "mime_type": "image/png", "bytes": 1234}]},
     "progress": [{"progress": 1.0, "total": null, "message": "...", "at": 0.4}],
     "errors": {}}

`seconds` is how long `execute_program` took and `at` when each progress notification (with --progress)
arrived, both counted from the moment the request was sent.

How the era is chosen (SDK 2.3.0, `mcp.client.Client(mode=...)`):
  auto          Client(mode="auto"), the SDK default: sends `server/discover` at 2026-07-28 first and
                falls back to `initialize` when the server does not answer it as a 2026 server.
  2026-07-28    the same probe, but the run fails unless the server accepted 2026-07-28.
                With --no-probe: Client(mode="2026-07-28"), which adopts the version without any
                `server/discover` (every request just carries the per-request `_meta`).
  2025-11-25    Client(mode="legacy"): the SDK's own `initialize` handshake (alias: legacy). The SDK
                always offers its newest handshake version, 2025-11-25, and has no option to offer
                another one.
  2024-11-05, 2025-03-26, 2025-06-18
                the SDK's ClientSession over the same transport, with the handshake done through its
                public API (`send_request(InitializeRequest)`, `adopt`, `send_notification(initialized)`):
                exactly what `ClientSession.initialize()` does, but offering the pinned version. From
                then on the SDK validates results and stamps requests at the negotiated version.

`wire` lists every message the client sent, as `method@version` (the `initialize` offer, or the
per-request `_meta` protocol version), so a test can see which lifecycle went over the wire.

Exit status: 0 when every request was answered (a tool result with isError still counts as an
answer), 1 when some request got a JSON-RPC error (see "errors"), 2 when the connection failed.
A request that takes longer than --timeout fails with an MCPError (the SDK's read timeout) and is
reported under "errors"; the whole run is bounded too. The server's stderr passes through to this script's stderr; stdout carries only the JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.client import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

CLIENT_INFO = types.Implementation(name="ptc-mcp-sdk-test-client", version="0.1.0")
PROTOCOL_CHOICES = ("auto", "legacy", *HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)


class _RecordingWriteStream:
    """Wraps the transport's write stream and notes `method@version` for each message sent."""

    def __init__(self, inner: Any, wire: list[str]) -> None:
        self._inner = inner
        self._wire = wire

    async def send(self, item: Any, /) -> None:
        message = getattr(item, "message", None)
        method = getattr(message, "method", None)
        if method is not None:
            params = getattr(message, "params", None) or {}
            version = params.get("protocolVersion") if method == "initialize" else None
            version = version or (params.get("_meta") or {}).get(PROTOCOL_VERSION_META_KEY)
            self._wire.append(f"{method}@{version}" if version else method)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _RecordingWriteStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._inner.__aexit__(*exc)


@asynccontextmanager
async def _recording_stdio(params: StdioServerParameters, wire: list[str]) -> AsyncIterator[Any]:
    async with stdio_client(params) as (read_stream, write_stream):
        yield read_stream, _RecordingWriteStream(write_stream, wire)


@asynccontextmanager
async def _recording_http(url: str, headers: dict[str, str], wire: list[str]) -> AsyncIterator[Any]:
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers) as http_client:
        async with streamable_http_client(url, http_client=http_client) as (read_stream, write_stream):
            yield read_stream, _RecordingWriteStream(write_stream, wire)


async def _pinned_initialize(session: ClientSession, version: str) -> None:
    """`ClientSession.initialize()`, offering `version` instead of the SDK's newest handshake version."""
    result = await session.send_request(
        types.InitializeRequest(
            params=types.InitializeRequestParams(
                protocol_version=version,
                capabilities=types.ClientCapabilities(),
                client_info=CLIENT_INFO,
            )
        ),
        types.InitializeResult,
    )
    if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        raise RuntimeError(f"Unsupported protocol version from the server: {result.protocol_version}")
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())


def _texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    if isinstance(exc, MCPError):
        return f"MCPError {exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


def _content(result: types.CallToolResult) -> list[dict[str, Any]]:
    """Each content block's type, and for images and audio their MIME type and size (base64 text)."""
    blocks = []
    for block in result.content:
        data = getattr(block, "data", None)
        entry: dict[str, Any] = {"type": block.type}
        if data is not None:
            entry.update(mime_type=block.mime_type, bytes=len(data))
        blocks.append(entry)
    return blocks


async def _exercise(
    api: Any,
    session: ClientSession,
    code: str,
    list_args: dict[str, Any],
    report: dict[str, Any],
    want_progress: bool = False,
) -> None:
    """List tools, call list_callable_tools and execute_program; `api` is a Client or a ClientSession."""
    report["negotiated_version"] = session.protocol_version
    if session.initialize_result is not None:
        report["lifecycle"] = "initialize"
    elif any(sent.startswith("server/discover") for sent in report["wire"]):
        report["lifecycle"] = "discover"
    else:
        report["lifecycle"] = "adopt"  # a 2026 version pinned without a probe (--no-probe)
    info = session.server_info
    report["server_info"] = info.model_dump(mode="json", exclude_none=True) if info is not None else None

    errors = report["errors"]
    try:
        listing = await api.list_tools()
        report["tools"] = [tool.name for tool in listing.tools]
    except MCPError as exc:
        errors["tools/list"] = _describe(exc)

    try:
        callable_result = await api.call_tool("list_callable_tools", list_args)
        texts = _texts(callable_result)
        report["callable"] = texts[0] if texts else None
        report["callable_extra"] = texts[1:]
        if callable_result.is_error:
            errors["list_callable_tools"] = "isError: " + "\n".join(texts)
    except MCPError as exc:
        errors["list_callable_tools"] = _describe(exc)

    started = time.monotonic()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        report["progress"].append({"progress": progress, "total": total, "message": message,
                                   "at": time.monotonic() - started})

    try:
        run = await api.call_tool("execute_program", {"code": code},
                                  progress_callback=on_progress if want_progress else None)
        report["execute"] = {
            "seconds": time.monotonic() - started,
            "is_error": bool(run.is_error),
            "text": "\n".join(_texts(run)),
            "structured": run.structured_content,
            "content": _content(run),
        }
    except MCPError as exc:
        errors["execute_program"] = _describe(exc)


def _elicitation_callback(args: argparse.Namespace, report: dict[str, Any]) -> Any:
    """With --elicit ANSWER: answers every elicitation with ANSWER (after --elicit-delay seconds) and records
    its message under "elicitations"; without it, None (the client does not declare elicitation)."""
    if args.elicit is None:
        return None

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        report["elicitations"].append(getattr(params, "message", None))
        await anyio.sleep(args.elicit_delay)
        return types.ElicitResult(action=args.elicit, content={} if args.elicit == "accept" else None)

    return answer


async def _run(args: argparse.Namespace, code: str, report: dict[str, Any]) -> None:
    list_args = json.loads(args.list_args)
    if args.url:
        headers = dict(header.split(":", 1) for header in args.header)
        transport = _recording_http(args.url, {k.strip(): v.strip() for k, v in headers.items()}, report["wire"])
    else:
        env = None if args.sdk_default_env else dict(os.environ)
        params = StdioServerParameters(command=args.command[0], args=args.command[1:], env=env)
        transport = _recording_stdio(params, report["wire"])
    protocol = LATEST_HANDSHAKE_VERSION if args.protocol == "legacy" else args.protocol

    if protocol in HANDSHAKE_PROTOCOL_VERSIONS and protocol != LATEST_HANDSHAKE_VERSION:
        async with transport as (read_stream, write_stream):
            async with ClientSession(
                read_stream, write_stream, read_timeout_seconds=args.timeout, client_info=CLIENT_INFO,
                elicitation_callback=_elicitation_callback(args, report),
            ) as session:
                await _pinned_initialize(session, protocol)
                await _exercise(session, session, code, list_args, report, args.progress)
        return

    if protocol == LATEST_HANDSHAKE_VERSION:
        mode = "legacy"
    elif protocol in MODERN_PROTOCOL_VERSIONS and args.no_probe:
        mode = protocol
    else:
        mode = "auto"
    async with Client(transport, mode=mode, read_timeout_seconds=args.timeout, client_info=CLIENT_INFO,
                      elicitation_callback=_elicitation_callback(args, report)) as client:
        if protocol in MODERN_PROTOCOL_VERSIONS and client.protocol_version != protocol:
            report["errors"]["connect"] = (
                f"asked for {protocol} but the SDK negotiated {client.protocol_version} "
                f"(server/discover was not accepted at {protocol})"
            )
        await _exercise(client, client.session, code, list_args, report, args.progress)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s [--protocol P] [--code CODE | --code-file FILE] [--timeout S] "
              "(-- COMMAND [ARGS...] | --url URL [--header 'Name: value']...)",
    )
    parser.add_argument("--protocol", default="auto", choices=PROTOCOL_CHOICES,
                        help="era / version to connect with (default: auto, the SDK default)")
    parser.add_argument("--no-probe", action="store_true",
                        help="with --protocol 2026-07-28: adopt the version without server/discover")
    parser.add_argument("--code", default="print(1)", help="program for execute_program (default: print(1))")
    parser.add_argument("--code-file", help="read the program for execute_program from this file")
    parser.add_argument("--list-args", default="{}",
                        help="the arguments of the list_callable_tools call, as a JSON object (default: {})")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds each request may take (default: 60); the whole run gets 3x that + 10")
    parser.add_argument("--sdk-default-env", action="store_true",
                        help="give the server only the SDK's default environment (PATH, HOME, ...) "
                             "instead of this process's whole environment")
    parser.add_argument("--elicit", choices=("accept", "decline", "cancel"),
                        help="declare elicitation and answer every request so; messages go to \"elicitations\"")
    parser.add_argument("--elicit-delay", type=float, default=0.0,
                        help="with --elicit: seconds to wait before answering (a person thinking)")
    parser.add_argument("--progress", action="store_true",
                        help="ask for progress on execute_program; notifications go to \"progress\"")
    parser.add_argument("--url", help="connect over streamable HTTP to this URL instead of starting a command")
    parser.add_argument("--header", action="append", default=[],
                        help="with --url: an HTTP header sent with every request, as 'Name: value'")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the server command")
    args = parser.parse_args()
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command and not args.url:
        parser.error("give the server command after --, or --url")
    code = args.code
    if args.code_file:
        with open(args.code_file, encoding="utf-8") as f:
            code = f.read()

    report: dict[str, Any] = {
        "negotiated_version": None,
        "lifecycle": None,
        "server_info": None,
        "wire": [],
        "tools": None,
        "callable": None,
        "callable_extra": [],
        "execute": None,
        "progress": [],
        "elicitations": [],
        "errors": {},
    }

    overall = args.timeout * 3 + 10

    async def bounded() -> None:
        try:
            with anyio.fail_after(overall):
                await _run(args, code, report)
        except TimeoutError:
            raise TimeoutError(f"the run did not finish within {overall:g}s") from None

    status = 0
    try:
        anyio.run(bounded)
    except Exception as exc:  # connection failures, timeouts, a server that died mid-run
        report["errors"]["connect"] = _describe(exc)
        status = 2
    if status == 0 and report["errors"]:
        status = 2 if "connect" in report["errors"] else 1
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
