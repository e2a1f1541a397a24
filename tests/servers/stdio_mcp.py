"""Minimal MCP server over stdio (newline-delimited JSON-RPC 2.0), stdlib only.

Test fixtures build on this instead of the official SDK so they run on any
Python 3.11 without installing packages, and so they can misbehave on purpose
(hang, crash, emit garbage) in ways a real SDK would not allow.

Stdout carries only JSON-RPC messages; diagnostics go to stderr.
"""

import base64
import json
import sys
import threading
import time
import traceback

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = "2025-11-25"
# Offered through server/discover by a server created with modern=True.
MODERN_VERSION = "2026-07-28"

# A handler returns this to leave the request unanswered forever.
NO_REPLY = object()


class RpcError(Exception):
    """Raised by a handler to answer with a JSON-RPC error instead of a result."""

    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def text(value):
    """A text content block."""
    return {"type": "text", "text": value}


def log(message):
    print(message, file=sys.stderr, flush=True)


class Server:
    def __init__(self, name, page_size=0, modern=False, first_answer_delay=0, on_request=None):
        self.name = name
        self.page_size = page_size  # 0 means tools/list returns everything at once
        # modern: also speak 2026-07-28 (answer server/discover); otherwise it is a 2025-era server, whose
        # answer to server/discover is "Method not found".
        self.modern = modern
        # Seconds to wait before handling the first message, like a server still importing its SDK.
        self.first_answer_delay = first_answer_delay
        self.on_request = on_request  # called with each request's method, before it is handled
        self._tools = {}  # name -> (definition, handler, pass_id); insertion order is list order
        self._tools_lock = threading.Lock()
        self._write_lock = threading.Lock()

    def add_tool(self, name, handler, description, input_schema, *,
                 output_schema=None, meta=None, title=None, annotations=None, pass_id=False):
        """Register `handler(arguments) -> CallToolResult | NO_REPLY`; with pass_id,
        `handler(arguments, request_id)`, for a handler that writes its own answer."""
        definition = {"name": name, "description": description, "inputSchema": input_schema}
        optional = {"title": title, "outputSchema": output_schema,
                    "annotations": annotations, "_meta": meta}
        definition.update({k: v for k, v in optional.items() if v is not None})
        with self._tools_lock:
            self._tools[name] = (definition, handler, pass_id)

    def tool(self, name, description, input_schema, **options):
        """Decorator form of add_tool."""
        def register(handler):
            self.add_tool(name, handler, description, input_schema, **options)
            return handler
        return register

    # -- output ---------------------------------------------------------------

    def write_raw(self, line):
        """Write one line to stdout as is; whole lines never interleave."""
        self.write_bytes((line + "\n").encode("utf-8"))

    def write_bytes(self, data):
        """Write bytes to stdout as they are (they need not be UTF-8, nor end a line)."""
        with self._write_lock:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def send(self, message):
        self.write_raw(json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False))

    def notify(self, method, params=None):
        message = {"method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def notify_tools_changed(self):
        self.notify("notifications/tools/list_changed")

    # -- dispatch -------------------------------------------------------------

    def serve(self):
        """Handle requests until stdin closes; in-flight calls die with the process."""
        first = True
        for raw in sys.stdin.buffer:
            if first and self.first_answer_delay:
                time.sleep(self.first_answer_delay)
            first = False
            line = raw.decode("utf-8").strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except json.JSONDecodeError as exc:
                self.send({"id": None, "error": {"code": -32700, "message": f"Parse error: {exc}"}})
                continue
            if not isinstance(message, dict) or "method" not in message:
                # Responses to our (non-existent) requests, or batches: nothing to do.
                continue
            if "id" not in message:
                continue  # notifications (initialized, cancelled, ...) need no action
            if self.on_request:
                self.on_request(message["method"])
            if message["method"] == "tools/call":
                # Own thread per call so slow tools overlap instead of queueing.
                threading.Thread(target=self._respond, args=(message,), daemon=True).start()
            else:
                self._respond(message)

    def _respond(self, message):
        request_id = message["id"]
        try:
            result = self._handle(message["method"], message.get("params") or {}, request_id)
        except RpcError as exc:
            error = {"code": exc.code, "message": exc.message}
            if exc.data is not None:
                error["data"] = exc.data
            self.send({"id": request_id, "error": error})
            return
        except Exception as exc:  # a fixture bug should surface, not kill the server
            traceback.print_exc(file=sys.stderr)
            self.send({"id": request_id, "error": {"code": -32603, "message": str(exc)}})
            return
        if result is not NO_REPLY:
            self.send({"id": request_id, "result": result})

    def _handle(self, method, params, request_id=None):
        if method == "initialize":
            requested = params.get("protocolVersion")
            return {
                "protocolVersion": requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": self.name, "version": "0.1.0"},
            }
        if method == "server/discover" and self.modern:
            return {
                "resultType": "complete",
                "supportedVersions": [MODERN_VERSION],
                "capabilities": {"tools": {"listChanged": True}},
                "ttlMs": 0,
                "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": self.name, "version": "0.1.0"}},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return self._list_tools(params.get("cursor"))
        if method == "tools/call":
            with self._tools_lock:
                entry = self._tools.get(params.get("name"))
            if entry is None:
                raise RpcError(-32602, f"Unknown tool: {params.get('name')}")
            _, handler, pass_id = entry
            arguments = params.get("arguments") or {}
            return handler(arguments, request_id) if pass_id else handler(arguments)
        raise RpcError(-32601, "Method not found")

    def _list_tools(self, cursor):
        with self._tools_lock:
            tools = [definition for definition, _, _ in self._tools.values()]
        if not self.page_size:
            return {"tools": tools}
        start = _decode_cursor(cursor) if cursor is not None else 0
        end = start + self.page_size
        page = {"tools": tools[start:end]}
        if end < len(tools):
            page["nextCursor"] = base64.urlsafe_b64encode(f"offset:{end}".encode()).decode()
        return page


def _decode_cursor(cursor):
    """Cursors are opaque to clients; a mangled one is an invalid-params error."""
    try:
        prefix, offset = base64.urlsafe_b64decode(cursor.encode()).decode().split(":")
        if prefix == "offset" and int(offset) >= 0:
            return int(offset)
    except (ValueError, AttributeError, UnicodeDecodeError):
        pass
    raise RpcError(-32602, f"Invalid cursor: {cursor!r}")
