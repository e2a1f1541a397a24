"""Fault-injection MCP server for ptc-mcp integration tests.

Each tool exercises one behaviour a real downstream may show: result shapes
from different SDKs, errors at every layer, slow / hung / crashing calls,
protocol garbage, and tool lists that change at runtime.
"""

import argparse
import base64
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stdio_mcp import NO_REPLY, RpcError, Server, log, text  # noqa: E402

NO_ARGS = {"type": "object", "properties": {}}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def result(*content, structured=None, is_error=False, meta=None):
    """Build a CallToolResult, omitting the optional fields left unset."""
    out = {"content": list(content)}
    if structured is not None:
        out["structuredContent"] = structured
    if is_error:
        out["isError"] = True
    if meta is not None:
        out["_meta"] = meta
    return out


def json_text(value):
    return text(json.dumps(value))


def register_tools(server):
    tool = server.tool

    @tool("echo", "Return the call arguments as JSON text.",
          {"type": "object", "properties": {"message": {"type": "string"}},
           "additionalProperties": True})
    def echo(args):
        return result(json_text(args))

    @tool("add", "Add two numbers.",
          {"type": "object",
           "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
           "required": ["a", "b"]},
          output_schema={"type": "object", "properties": {"sum": {"type": "number"}},
                         "required": ["sum"]})
    def add(args):
        structured = {"sum": args["a"] + args["b"]}
        return result(json_text(structured), structured=structured)

    @tool("structured_with_note",
          "Structured result whose text content carries an extra warning block.", NO_ARGS)
    def structured_with_note(args):
        structured = {"value": 1}
        return result(json_text(structured), text("EMPTY RESULT warning: nothing matched"),
                      structured=structured)

    # The official Python SDK wraps non-object returns as {"result": ...} and
    # emits one text block per list item.
    @tool("sdk_list", "List result in the official Python SDK style.", NO_ARGS,
          output_schema={"type": "object",
                         "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
                         "required": ["result"], "title": "sdk_listOutput"})
    def sdk_list(args):
        return result(text("1"), text("2"), text("3"), structured={"result": [1, 2, 3]})

    # The same with rows, for a large result of many small objects (the benchmark's structured row).
    row_schema = {"type": "object", "required": ["id", "name", "tags", "score"],
                  "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                                 "tags": {"type": "array", "items": {"type": "string"}},
                                 "score": {"type": "number"}}}

    @tool("sdk_rows", "`count` rows in the official Python SDK style.",
          {"type": "object", "properties": {"count": {"type": "integer", "minimum": 0}},
           "required": ["count"]},
          output_schema={"type": "object", "required": ["result"],
                         "properties": {"result": {"type": "array", "items": row_schema}}})
    def sdk_rows(args):
        rows = [{"id": i, "name": f"row {i}", "tags": ["a", "b"], "score": i * 0.5}
                for i in range(args["count"])]
        return result(*(json_text(row) for row in rows), structured={"result": rows})

    # FastMCP marks its {"result": ...} wrapping in the output schema ...
    @tool("fastmcp_wrapped", "Scalar result wrapped the FastMCP way (schema marker).", NO_ARGS,
          output_schema={"type": "object", "properties": {"result": {"type": "string"}},
                         "required": ["result"], "x-fastmcp-wrap-result": True})
    def fastmcp_wrapped(args):
        return result(text("hello"), structured={"result": "hello"})

    # ... or, without an output schema, in the result's _meta.
    @tool("fastmcp_meta_wrapped", "List result wrapped the FastMCP way (_meta marker).", NO_ARGS)
    def fastmcp_meta_wrapped(args):
        return result(text("[4, 5]"), structured={"result": [4, 5]},
                      meta={"fastmcp": {"wrap_result": True}})

    @tool("multi_text", "Two text blocks: a summary line and a JSON payload.", NO_ARGS)
    def multi_text(args):
        return result(text("Found 2 items"), text('{"items": [1, 2]}'))

    @tool("plain_text", "A single plain-text block.", NO_ARGS)
    def plain_text(args):
        return result(text("hello world"))

    @tool("image", "Text plus an image block.", NO_ARGS)
    def image(args):
        return result(text("chart attached"),
                      {"type": "image", "data": base64.b64encode(PNG_SIGNATURE).decode(),
                       "mimeType": "image/png"})

    @tool("fail", "Tool-level failure (isError result).", NO_ARGS)
    def fail(args):
        return result(text("something broke"), is_error=True)

    @tool("rpc_error", "Protocol-level failure (JSON-RPC error).", NO_ARGS)
    def rpc_error(args):
        raise RpcError(-32000, "internal failure")

    @tool("bad_schema", "Structured result that violates its own output schema.", NO_ARGS,
          output_schema={"type": "object", "properties": {"count": {"type": "integer"}},
                         "required": ["count"]})
    def bad_schema(args):
        structured = {"count": "many"}
        return result(json_text(structured), structured=structured)

    @tool("say", "Return `text` as one plain text block, verbatim.",
          {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    def say(args):
        return result(text(args["text"]))

    @tool("huge", "Return a text block of roughly `size` bytes.",
          {"type": "object", "properties": {"size": {"type": "integer", "minimum": 0}},
           "required": ["size"]})
    def huge(args):
        return result(json_text({"data": "x" * args["size"]}))

    @tool("sleep", "Sleep for `seconds`, then answer.",
          {"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0}},
           "required": ["seconds"]})
    def sleep(args):
        started = time.monotonic()
        time.sleep(args["seconds"])
        return result(json_text({"slept": args["seconds"], "started": started, "ended": time.monotonic()}))

    @tool("hang", "Never answer.", NO_ARGS)
    def hang(args):
        return NO_REPLY

    @tool("crash", "Exit the process without answering.", NO_ARGS)
    def crash(args):
        log("mock: crashing as asked")
        os._exit(1)

    @tool("garbage", "Write a non-JSON line to stdout, then answer normally.", NO_ARGS)
    def garbage(args):
        server.write_raw("this is not json-rpc")
        return result(text("ok"))

    calls = {"count": 0}
    calls_lock = threading.Lock()

    @tool("counter", "Count calls within this process (resets on restart).", NO_ARGS)
    def counter(args):
        with calls_lock:
            calls["count"] += 1
            count = calls["count"]
        return result(json_text({"count": count, "pid": os.getpid()}))

    added = {"count": 0}
    added_lock = threading.Lock()

    @tool("add_tool", "Register a new tool dynamic_<k> and announce the list change.", NO_ARGS)
    def add_tool(args):
        with added_lock:
            added["count"] += 1
            name = f"dynamic_{added['count']}"
        server.add_tool(name, lambda _args: result(text("dynamic")),
                        "Tool added at runtime by add_tool.", NO_ARGS)
        server.notify_tools_changed()
        return result(text(f"added {name}"))

    @tool("get-item", "Fetch an item by id (dashed name, to test name mapping).",
          {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]})
    def get_item(args):
        return result(json_text({"id": args["id"]}))

    @tool("env", "Return this process's environment variables as JSON.", NO_ARGS)
    def env(args):
        return result(json_text(dict(os.environ)))


def register_collisions(server):
    """Two names that map to the same identifier once dashes become underscores."""
    for name in ("dup-name", "dup_name"):
        server.add_tool(name, lambda _args, name=name: result(text(name)),
                        f"Collision fixture; answers with its own name ({name}).", NO_ARGS)


def register_file_style(server):
    """@modelcontextprotocol/server-filesystem's result shape: a structured field, again as the text."""
    server.add_tool("file_style", lambda args: result(text(args["text"]), structured={"content": args["text"]}),
                    "Return `text` as server-filesystem's read_text_file does.",
                    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


def register_media(server):
    """A result with an image and an audio block of `size` bytes each (base64 text), between two texts."""
    def media(args):
        size = args.get("size", 8)
        blob = base64.b64encode(b"\0" * (size * 3 // 4)).decode()
        return result(text(f"media #{args.get('n', 0)}"),
                      {"type": "image", "data": blob, "mimeType": "image/png"},
                      {"type": "audio", "data": blob, "mimeType": "audio/wav"})

    server.add_tool("media", media, "Text, then an image and an audio block of `size` base64 bytes each.",
                    {"type": "object", "properties": {"n": {"type": "integer"}, "size": {"type": "integer"}}})


def register_noisy_stderr(server):
    """A tool that writes to stderr what a careless server may: a byte that is not UTF-8, a very long line."""
    def stderr(args):
        sys.stderr.buffer.write(b"mock: \xff is not UTF-8\n" + b"x" * args["size"] + b"\n")
        sys.stderr.buffer.flush()
        return result(text("written"))

    server.add_tool("stderr", stderr, "Write a line that is not UTF-8 and one of `size` bytes to stderr, then answer.",
                    {"type": "object", "properties": {"size": {"type": "integer", "minimum": 0}},
                     "required": ["size"]})


def register_broken_answers(server):
    """A tool whose answer does not parse: `kind` 'utf8' puts a byte that is not UTF-8 in a string, 'truncated'
    cuts the line short (the id comes first, as most SDKs write it)."""
    def broken(args, request_id):
        answer = json.dumps({"jsonrpc": "2.0", "id": request_id,
                             "result": {"content": [{"type": "text", "text": "PLACEHOLDER"}]}})
        raw = answer.encode()
        if args["kind"] == "utf8":
            raw = raw.replace(b"PLACEHOLDER", b"bad \xff byte")
        else:
            raw = raw[:raw.index(b"PLACEHOLDER")]
        server.write_bytes(raw + b"\n")
        return NO_REPLY

    server.add_tool("broken_answer", broken, "Answer with a line that does not parse (kind: utf8 or truncated).",
                    {"type": "object", "properties": {"kind": {"enum": ["utf8", "truncated"]}},
                     "required": ["kind"]}, pass_id=True)


def register_deprecated(server):
    """A deprecated tool and its replacement, described as server-filesystem describes read_file."""
    path = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    server.add_tool("read_file", lambda args: result(text(args["path"])),
                    "Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.", path)
    server.add_tool("read_text_file", lambda args: result(text(args["path"])),
                    "Read the complete contents of a file from the file system as text.", path)


def register_extras(server, count):
    for i in range(count):
        server.add_tool(f"extra_{i}", lambda _args: result(text("ok")),
                        f"Filler tool {i} for pagination tests.", NO_ARGS)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="mock", help="serverInfo.name")
    parser.add_argument("--page-size", type=int, default=0,
                        help="tools/list page size (0 = no pagination)")
    parser.add_argument("--fail-start", action="store_true",
                        help="exit 1 at startup, before reading stdin")
    parser.add_argument("--fail-start-traceback", action="store_true",
                        help="die at startup with an uncaught exception (a traceback on stderr, status 1)")
    parser.add_argument("--era", choices=("2025", "2026"), default="2025",
                        help="2026: also answer server/discover (speak 2026-07-28)")
    parser.add_argument("--first-answer-delay", type=float, default=0, metavar="SECONDS",
                        help="wait this long before handling the first message")
    parser.add_argument("--spawn-child", action="store_true",
                        help="start a child in this process group that ignores SIGTERM; record 'child <pid>'")
    parser.add_argument("--state-file",
                        help="append 'start <pid>' here on every start, to count restarts")
    parser.add_argument("--record-requests", action="store_true",
                        help="also append 'request <method>' to the state file for every request")
    parser.add_argument("--collide", action="store_true",
                        help="also register the colliding tools dup-name and dup_name")
    parser.add_argument("--file-style", action="store_true",
                        help="also register file_style, which answers as server-filesystem does")
    parser.add_argument("--media", action="store_true",
                        help="also register media, whose result carries an image and an audio block")
    parser.add_argument("--noisy-stderr", action="store_true",
                        help="also register stderr, which writes bytes that are not UTF-8 and a long line to stderr")
    parser.add_argument("--broken-answers", action="store_true",
                        help="also register broken_answer, whose answer does not parse")
    parser.add_argument("--deprecated", action="store_true",
                        help="also register read_file, deprecated, and its replacement read_text_file")
    parser.add_argument("--extra-tools", type=int, default=0, metavar="N",
                        help="also register N trivial tools extra_0..extra_{N-1}")
    options = parser.parse_args()

    def record(line):
        if options.state_file:
            with open(options.state_file, "a", encoding="utf-8") as state:
                state.write(line + "\n")

    # Recorded before --fail-start so failed start attempts are counted too.
    record(f"start {os.getpid()}")
    if options.fail_start:
        log("mock: failing at start as asked")
        sys.exit(1)
    if options.fail_start_traceback:
        raise RuntimeError("mock: failing at start with a traceback")
    if options.spawn_child:
        ignore_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
        child = subprocess.Popen([sys.executable, "-c", ignore_term], stdin=subprocess.DEVNULL)
        record(f"child {child.pid}")

    server = Server(options.name, page_size=options.page_size, modern=options.era == "2026",
                    first_answer_delay=options.first_answer_delay,
                    on_request=(lambda method: record(f"request {method}")) if options.record_requests else None)
    register_tools(server)
    if options.collide:
        register_collisions(server)
    if options.file_style:
        register_file_style(server)
    if options.media:
        register_media(server)
    if options.noisy_stderr:
        register_noisy_stderr(server)
    if options.broken_answers:
        register_broken_answers(server)
    if options.deprecated:
        register_deprecated(server)
    register_extras(server, options.extra_tools)
    server.serve()


if __name__ == "__main__":
    main()
