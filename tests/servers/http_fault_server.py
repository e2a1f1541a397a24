"""Fault-injecting MCP server over HTTP for ptc-mcp integration tests (standard library only).

Serves the tools of mock_server.py plus a few HTTP faults, over either transport:

  streamable HTTP (default)  POST /mcp; JSON responses (--response json) or SSE-framed ones that start
                             with the empty priming event of 2025-11-25 servers (--response sse);
                             stateless, or with session ids (--sessions: Mcp-Session-Id, GET stream for
                             notifications, 404 for an unknown session).
  legacy HTTP+SSE (--legacy-sse)  GET /sse opens the event stream, whose `endpoint` event names the POST
                             URL in the style of --endpoint-style: ts (/message?sessionId=...), python
                             (/messages/?session_id=...) or absolute (http://127.0.0.1:PORT/message?...).

Faults: --fail STATUS answers every request with that bare HTTP status; --auth TOKEN demands
`Authorization: Bearer TOKEN` (401 with a challenge, or --auth-status 403 without one); --slow SECONDS
delays every tools/call. Tools: drop_connection (closes the connection mid-call: the POST, or in legacy
mode the event stream), http_500 (answers the call with a bare 500), rpc_error_500 (a JSON-RPC error
sent with HTTP status 500), expire_session (forgets every session id), and crash (exits the process).

The first line on stdout is `PORT <n>` (--port 0, the default, lets the OS choose). --state-file
appends one line per event: `initialize`, `stream` (legacy stream opened), `rejected` (bad credentials),
`failed` (answered with the --fail status).
"""

import argparse
import json
import os
import queue
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mock_server import NO_ARGS, register_tools, result  # noqa: E402
from stdio_mcp import NO_REPLY, RpcError, Server, log, text  # noqa: E402

OPTIONS = None
STATE_LOCK = threading.Lock()
SESSIONS = set()
SESSIONS_LOCK = threading.Lock()


class Drop:
    """A tool result that closes the connection instead of answering."""


class Status:
    """A tool result answered as a bare HTTP status (no JSON-RPC body)."""

    def __init__(self, code):
        self.code = code


class ErrorWithStatus:
    """A tool result answered as a JSON-RPC error with this HTTP status."""

    def __init__(self, code, error):
        self.code = code
        self.error = error


def record(event):
    if OPTIONS.state_file:
        with STATE_LOCK, open(OPTIONS.state_file, "a", encoding="utf-8") as state:
            state.write(event + "\n")


class HttpServerTools(Server):
    """The stdio fixture's dispatch, with messages it sends on its own (notifications, the garbage tool's
    raw line) going to every open event stream instead of stdout."""

    def __init__(self, name):
        super().__init__(name)
        self.streams = []  # one queue per open stream; None in a queue closes that stream
        self.streams_lock = threading.Lock()

    def write_raw(self, line):
        with self.streams_lock:
            for stream in self.streams:
                stream.put(line)

    def open_stream(self):
        stream = queue.Queue()
        with self.streams_lock:
            self.streams.append(stream)
        return stream

    def close_stream(self, stream):
        with self.streams_lock:
            if stream in self.streams:
                self.streams.remove(stream)

    def close_all_streams(self):
        with self.streams_lock:
            for stream in self.streams:
                stream.put(None)

    def dispatch(self, message):
        """The outcome of one request: a JSON-RPC response dict, or Drop / Status / ErrorWithStatus /
        NO_REPLY."""
        try:
            outcome = self._handle(message["method"], message.get("params") or {})
        except RpcError as exc:
            return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": exc.code, "message": exc.message}}
        if isinstance(outcome, (Drop, Status, ErrorWithStatus)) or outcome is NO_REPLY:
            return outcome
        return {"jsonrpc": "2.0", "id": message["id"], "result": outcome}


def register_http_tools(server):
    tool = server.tool

    @tool("drop_connection", "Close the connection mid-call (legacy transport: the event stream).", NO_ARGS)
    def drop_connection(args):
        return Drop()

    @tool("http_500", "Answer this call with a bare HTTP 500.", NO_ARGS)
    def http_500(args):
        return Status(500)

    @tool("rpc_error_500", "A JSON-RPC error sent with HTTP status 500.", NO_ARGS)
    def rpc_error_500(args):
        return ErrorWithStatus(500, {"code": -32603, "message": "failed behind a 500"})

    @tool("expire_session", "Forget every session id (the next request gets 404).", NO_ARGS)
    def expire_session(args):
        with SESSIONS_LOCK:
            SESSIONS.clear()
        return result(text("expired"))


class Handler(BaseHTTPRequestHandler):
    server_version = "http-fault-server/1"

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on this request (a timeout or a cancelled call)

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if OPTIONS.verbose:
            log("http: " + format % args)

    # -- helpers ----------------------------------------------------------------------------------

    def authorized(self):
        if not OPTIONS.auth or self.headers.get("Authorization") == f"Bearer {OPTIONS.auth}":
            return True
        record("rejected")
        self.send_response(OPTIONS.auth_status)
        if OPTIONS.auth_status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="fault-server"')
        self.send_body(b"credentials rejected", "text/plain")
        return False

    def send_body(self, body, content_type, extra_headers=()):
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def bare_status(self, code):
        self.send_response(code)
        self.send_body(f"HTTP {code} from the fault server".encode(), "text/plain")

    def drop(self):
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def start_event_stream(self, extra_headers=()):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()

    def event(self, data, event=None, event_id=None):
        lines = []
        if event:
            lines.append(f"event: {event}")
        if event_id is not None:
            lines.append(f"id: {event_id}")
        lines.extend(f"data: {line}" for line in data.split("\n"))
        self.wfile.write(("\n".join(lines) + "\n\n").encode())
        self.wfile.flush()

    def read_json(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def follow(self, stream):
        """Write queued messages to the open event stream until it is closed or the client goes away."""
        try:
            while True:
                try:
                    line = stream.get(timeout=10)
                except queue.Empty:
                    self.wfile.write(b": keep-alive\n\n")
                    self.wfile.flush()
                    continue
                if line is None:
                    self.drop()
                    return
                self.event(line, event="message")
        except OSError:
            pass
        finally:
            TOOLS.close_stream(stream)

    # -- methods ----------------------------------------------------------------------------------

    def refused(self):
        """Answers the request itself when credentials are wrong or --fail is set; then the caller stops."""
        if not self.authorized():
            return True
        if OPTIONS.fail:
            record("failed")
            self.bare_status(OPTIONS.fail)
            return True
        return False

    def do_GET(self):
        if self.refused():
            return
        path = urlsplit(self.path).path
        if OPTIONS.legacy_sse and path == "/sse":
            return self.legacy_stream()
        if not OPTIONS.legacy_sse and path == "/mcp" and OPTIONS.sessions:
            if self.headers.get("Mcp-Session-Id") not in SESSIONS:
                return self.bare_status(404)
            stream = TOOLS.open_stream()
            self.start_event_stream()
            self.event("", event_id="0")  # priming event
            return self.follow(stream)
        if not OPTIONS.legacy_sse and path == "/mcp":
            return self.bare_status(405)  # stateless: no server-initiated stream
        self.bare_status(404)

    def do_DELETE(self):
        self.bare_status(405)

    def do_POST(self):
        if self.refused():
            return
        path = urlsplit(self.path).path
        if OPTIONS.legacy_sse and path in ("/message", "/messages/"):
            return self.legacy_post()
        if not OPTIONS.legacy_sse and path == "/mcp":
            return self.streamable_post()
        self.bare_status(404)

    # -- streamable HTTP ----------------------------------------------------------------------------

    def streamable_post(self):
        message = self.read_json()
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            self.send_response(202)
            self.end_headers()
            return
        method = message["method"]
        headers = []
        if method == "initialize":
            record("initialize")
            if OPTIONS.sessions:
                session = uuid.uuid4().hex
                with SESSIONS_LOCK:
                    SESSIONS.add(session)
                headers.append(("Mcp-Session-Id", session))
        elif OPTIONS.sessions and method != "server/discover":
            with SESSIONS_LOCK:
                known = self.headers.get("Mcp-Session-Id") in SESSIONS
            if not known:
                return self.bare_status(404)
        if method == "tools/call" and OPTIONS.slow:
            time.sleep(OPTIONS.slow)
        outcome = TOOLS.dispatch(message)
        if outcome is NO_REPLY:
            threading.Event().wait()
        if isinstance(outcome, Status):
            return self.bare_status(outcome.code)
        if isinstance(outcome, ErrorWithStatus):
            body = {"jsonrpc": "2.0", "id": message["id"], "error": outcome.error}
            self.send_response(outcome.code)
            return self.send_body(json.dumps(body).encode(), "application/json")
        if OPTIONS.response == "sse":
            self.start_event_stream(headers)
            self.event("", event_id="1")  # the empty priming event of 2025-11-25 servers
            if isinstance(outcome, Drop):
                return self.drop()
            self.event(json.dumps(outcome), event="message", event_id="2")
            return
        if isinstance(outcome, Drop):
            return self.drop()
        self.send_response(200)
        self.send_body(json.dumps(outcome).encode(), "application/json", headers)

    # -- legacy HTTP+SSE ----------------------------------------------------------------------------

    def legacy_stream(self):
        record("stream")
        session = uuid.uuid4().hex
        with SESSIONS_LOCK:
            SESSIONS.add(session)
        stream = TOOLS.open_stream()
        endpoint = {
            "ts": f"/message?sessionId={session}",
            "python": f"/messages/?session_id={session}",
            "absolute": f"http://127.0.0.1:{self.server.server_address[1]}/message?sessionId={session}",
        }[OPTIONS.endpoint_style]
        self.start_event_stream()
        self.event(endpoint, event="endpoint")
        self.follow(stream)

    def legacy_post(self):
        query = parse_qs(urlsplit(self.path).query)
        session = (query.get("sessionId") or query.get("session_id") or [""])[0]
        with SESSIONS_LOCK:
            known = session in SESSIONS
        if not known:
            return self.bare_status(404)
        message = self.read_json()
        # Like real legacy servers: accept at once, answer on the stream.
        self.send_response(202)
        self.send_body(b"Accepted", "text/plain")
        self.wfile.flush()
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            return
        if message["method"] == "initialize":
            record("initialize")
        if message["method"] == "tools/call" and OPTIONS.slow:
            time.sleep(OPTIONS.slow)
        outcome = TOOLS.dispatch(message)
        if isinstance(outcome, Drop):
            TOOLS.close_all_streams()
        elif isinstance(outcome, dict):
            TOOLS.write_raw(json.dumps(outcome))


TOOLS = None


def main():
    global OPTIONS, TOOLS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="fault")
    parser.add_argument("--legacy-sse", action="store_true")
    parser.add_argument("--endpoint-style", choices=("ts", "python", "absolute"), default="ts")
    parser.add_argument("--response", choices=("json", "sse"), default="json")
    parser.add_argument("--sessions", action="store_true")
    parser.add_argument("--fail", type=int, default=0, metavar="STATUS")
    parser.add_argument("--auth", metavar="TOKEN")
    parser.add_argument("--auth-status", type=int, choices=(401, 403), default=401)
    parser.add_argument("--slow", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--state-file")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    OPTIONS = parser.parse_args()

    TOOLS = HttpServerTools(OPTIONS.name)
    register_tools(TOOLS)
    register_http_tools(TOOLS)

    httpd = ThreadingHTTPServer(("127.0.0.1", OPTIONS.port), Handler)
    httpd.daemon_threads = True
    print(f"PORT {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
