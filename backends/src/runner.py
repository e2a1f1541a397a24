"""ptc-mcp runner, part 3: runs ONE model-written Python program (or, in a session, one after another) and talks to the
server (protocol v4, PROTOCOL.md).

packages.py, checks.py and explain.py precede this source (backends/src/protocol.rs joins them):
`prepare_packages` comes from the first, `Toolbox`, `ToolSpec` and `precheck` from the second, `Results` and
`explain` from the third.

Started as `python3 -I -S -c <this source>` (no __file__, no site-packages) in a scratch dir, possibly before
its program is known, so everything is imported up front and the runner waits warm for its `run` message.

Design:
* The channel is private. Fds 0/1 are duplicated to non-inheritable fds before the program exists; fd 0 then
  reads /dev/null and fds 1/2 feed a pipe drained by a daemon thread that turns whatever arrives into `output`
  messages, while sys.stdout/sys.stderr send their writes as `output` directly (nothing printed is stranded in
  a pipe by a crash). So print, os.write(1, ...), C extensions and child processes never write a channel line; only a
  deliberate write to the private fd could (the server distrusts every line anyway). The runner writes whole
  lines under one lock, and nothing after its `done`.
* Requests (`call`, `helper`) get ids from one counter; each `result` goes to the waiter registered under its
  id: an asyncio future (tools) or a threading.Event (synchronous helpers). While only one event loop's calls
  wait, that loop reads their results itself; a daemon reader thread reads while anything else waits, and
  idle watches the channel for hang-up. EOF on the channel means the server is gone: the process leaves at
  once with os._exit.
* The program gets a fresh `__main__` module as its globals. Runner state lives in closures and the Channel
  object, never under a name in those globals.
* Tool functions carry the tool's real signature and docstring; a call that cannot be right (positional,
  unknown or missing arguments) raises TypeError before anything is sent. With `precheck`, the program's
  syntax tree is checked first (checks.py) and a program with findings does not run at all.
* Errors teach: a NameError on an `mcp__` name says why it is no tool (closest names, server down, filtered),
  a TypeError/AttributeError on a coroutine while a tool call was never awaited asks about `await`, and an
  error about a value that came from a tool result shows where from and its shape (explain.py).
* `show(x)` attaches the images and audio of a tool result (or one of its placeholders) to the run's result:
  results that carry some list their placeholders in `media`; `show` names the call and the blocks, and the
  server checks and bounds what it attaches.
* `attach(path)` sends a file of the working directory (its bytes in base64, none past max_attachment_bytes) for
  the server to return as an embedded resource. Its path rules only make mistakes clear: the sandbox is what
  keeps the program from reading anything else.
* `progress(message, fraction=None)` checks its arguments, then sends a `progress` message only when the client
  asked for progress (`run.progress`), at most every PROGRESS_INTERVAL (a thread sends the latest when its turn
  comes): a program calling it in a loop does not wait for the server to read each. The server coalesces and
  rate-limits what it passes on.
* A `run` with `session` keeps the interpreter: after its `done` the runner waits for the next `run` and runs it
  in the same `__main__` globals (the tools rebound from the new message). Each run re-arms the soft CPU-time
  limit to the run's share; the hard limit the sandbox set bounds the session's whole life.
* The runner only keeps the channel clean: the server enforces every limit (time, calls, output) itself.
"""
import ast
import asyncio
import base64
import builtins
import codecs
import inspect
import io
import itertools
import json
import linecache
import mmap
import os
import re
import resource
import select
import stat
import sys
import threading
import time
import traceback
import types
import weakref

PROTOCOL_VERSION = 4
PROGRESS_MESSAGE_BYTES = 1024  # the longest progress() message, as UTF-8 (protocol.rs: MAX_PROGRESS_MESSAGE)
PROGRESS_INTERVAL = 0.05  # at most 20 progress messages a second; the server sends the client at most 4
PROGRAM = "<program>"  # filename of the program's code: the only frames tracebacks show
READ_CHUNK = 65536
LINE_READ_CHUNK = 1 << 20
FINAL_DRAIN_SECONDS = 0.2  # what fds 1/2 still hold at the end; a writer the program keeps alive is cut off
ORDERING_DRAIN_SECONDS = 0.05  # before a print: what fds 1/2 hold (a writer that never stops is not waited for)
# What the idle reader thread asks poll() about the channel: nothing on Linux, which reports a hang-up anyway;
# macOS reports nothing about a descriptor it is asked nothing about, so there the thread reads as well.
IDLE_POLL = 0 if sys.platform.startswith("linux") else select.POLLIN
ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
DECODER = json.JSONDecoder()
CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
EXCEPTION_GROUPS = getattr(builtins, "BaseExceptionGroup", ())  # 3.11+; isinstance(x, ()) is always False
# How the server starts every `result` line (serde writes the fields in this order): enough to find the waiting
# request when the rest of the line cannot be decoded.
RESULT_PREFIX = re.compile(rb'\{"type":"result","id":(\d{1,18}),')
# attach(): a MIME type as the server accepts it (RFC 6838 names, at most 64 characters each side), and the
# longest path it takes (relative to the working directory, in UTF-8).
MIME_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}")
MAX_ATTACH_NAME = 4096


class ToolError(Exception):
    """A tool call or helper failed; str(error) is the server's message."""


# The program sees ToolError as one of its own names; "__main__" also makes tracebacks read "ToolError: ...".
ToolError.__module__ = "__main__"


class Channel:
    """The line-oriented JSON channel to the server, on private fds.

    Results are read by whoever waits for them: an event loop whose calls are all that waits reads the channel
    in its own selector (one wake-up per result), and the reader thread reads it while anything else waits (a
    synchronous helper, a call awaited in another loop or thread). Idle, the reader thread only watches for the
    server going away."""

    def __init__(self, in_fd, out_fd):
        os.set_blocking(in_fd, False)  # several readers: none may block on a pipe another one just emptied
        self._in = in_fd
        self._read_lock = threading.Lock()  # one reader at a time, of the fd and the buffer
        self._buffer = bytearray()  # what was read past the last line
        self._scanned = 0  # the buffer's first bytes that hold no newline
        # Reads land here first: os.read would allocate (mmap), shrink and free a 1 MiB buffer every time. An
        # anonymous map rather than a bytearray: only the pages a read fills are ever touched, where zeroing
        # 1 MiB was a quarter of a forked runner's page faults.
        self._chunk = memoryview(mmap.mmap(-1, LINE_READ_CHUNK, flags=mmap.MAP_PRIVATE))
        self._run = None  # the next `run` message: (parsed message, None) or (None, why it could not be)
        self._awaiting_run = True  # the next line that is no `result` is a `run` (stale results are dropped)
        self._run_arrived = threading.Event()
        self._out = out_fd
        self._write_lock = threading.Lock()
        self._closed = False  # set by the final `done`: nothing may follow it
        self._pending_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending = {}  # request id -> (deliver(result message), the loop that reads for it or None)
        self._loop = None  # the loop that reads the channel for its own calls while nothing else waits
        self._loop_calls = 0  # its calls that wait
        self._others = 0  # requests that wait for the reader thread
        self._selectors = weakref.WeakSet()  # loops with the channel in their selector
        self._selector = lambda: None  # the latest of them (weakly): a cheaper check for the common case
        self._wake, self._waken = os.pipe()  # the reader thread's alarm: others went from 0 to 1
        os.set_blocking(self._waken, False)

    def send(self, message, last=False):
        # "replace" only matters for lone surrogates in diagnostics; program values are checked strictly.
        self.send_line((ENCODER.encode(message) + "\n").encode("utf-8", "replace"), last)

    def send_line(self, line, last=False):
        """Send one encoded message, ending in a newline."""
        data = memoryview(line)
        with self._write_lock:
            if self._closed:
                return
            self._closed = last
            try:
                while data:
                    data = data[os.write(self._out, data):]
            except OSError:
                os._exit(0)  # the server is gone

    def _pump(self):
        """Read what the channel holds (one read, never blocking) and route each complete line."""
        with self._read_lock:
            try:
                count = os.readv(self._in, [self._chunk])
            except BlockingIOError:  # another reader took it first
                return
            except OSError:  # the program closed the channel's fd: nothing can reach it any more
                count = 0
            if not count:
                os._exit(0)  # EOF: the server is gone, never outlive it
            self._buffer += self._chunk[:count]
            lines = []
            # Only the new bytes are searched: a multi-megabyte result costs a few reads and one copy.
            while (end := self._buffer.find(b"\n", self._scanned)) >= 0:
                lines.append(self._buffer[:end])  # one copy
                del self._buffer[:end + 1]  # O(1) for a bytearray's front
                self._scanned = 0
            self._scanned = len(self._buffer)
        for line in lines:
            self._route(line)

    def _route(self, line):
        try:
            message = DECODER.decode(line.decode())  # UTF-8, as the server writes (json.loads would guess)
            request_id = message["id"] if type(message) is dict and message.get("type") == "result" else None
            failure = None
        except Exception as e:  # never let a reader fail, nor a call wait for good
            failure = e
            message, request_id = undecodable(line, e)
        if request_id is None and self._awaiting_run:
            self._awaiting_run = False
            self._run = (message, None) if failure is None else (None, failure)
            self._run_arrived.set()
            return
        waiter = self._settle(request_id) if type(request_id) is int else None
        if waiter is not None:
            try:
                waiter(message)
            except Exception:  # one waiter's failure must not cost the other lines of this read
                pass

    def receive_run(self):
        """The next `run` message (a session's runner waits for one after each `done`): the main thread reads
        the channel itself meanwhile, and so may a thread the session's program left behind."""
        while not self._run_arrived.is_set():
            select.select([self._in], [], [], 0.05)
            self._pump()
        (message, failure), self._run = self._run, None
        if failure is not None:
            raise failure
        return message

    def await_next_run(self):
        """After a session's `done`: the next line that is no `result` is the next run."""
        self._run_arrived.clear()
        self._awaiting_run = True

    def open_request(self, deliver, loop=None):
        """Reserve the next id; its result goes to deliver(message), on whichever thread reads it. Register
        before sending: no race. A call awaited in `loop` (this thread's running loop) is read by that loop
        while no other loop's call or helper waits."""
        if loop is not None and loop is not self._selector() and loop not in self._selectors:
            try:
                loop.add_reader(self._in, self._pump)
                self._selectors.add(loop)
                self._selector = weakref.ref(loop)
            except (NotImplementedError, RuntimeError, ValueError, OSError):  # a loop without a selector
                loop = None
        with self._pending_lock:
            request_id = next(self._ids)
            if loop is not None and self._loop in (None, loop):
                self._loop = loop
                self._loop_calls += 1
            else:
                loop = None
                self._others += 1
                if self._others == 1:
                    try:
                        os.write(self._waken, b"!")
                    except OSError:  # full of rings already, or closed by the program (the thread then reads)
                        pass
            self._pending[request_id] = (deliver, loop)
        return request_id

    def close_request(self, request_id):
        self._settle(request_id)

    def _settle(self, request_id):
        """Forget a request; its deliver() if it still waited."""
        with self._pending_lock:
            waiter = self._pending.pop(request_id, None)
            if waiter is None:
                return None
            deliver, loop = waiter
            if loop is None:
                self._others -= 1
            else:
                self._loop_calls -= 1
                if not self._loop_calls:
                    self._loop = None
        return deliver

    def serve_results(self):
        """Reader thread: read the channel while a request waits that no loop reads for; otherwise watch it
        only for the server going away."""
        poller = select.poll()
        poller.register(self._wake, select.POLLIN)
        idle = IDLE_POLL
        while True:
            with self._pending_lock:
                wanted = self._others > 0
            poller.register(self._in, select.POLLIN if wanted else idle)
            for fd, _ in poller.poll():
                if fd == self._in:
                    self._pump()
                    continue
                try:
                    rung = os.read(self._wake, 64)
                except OSError:
                    rung = b""
                if not rung:  # the program closed the alarm: from now on, read whatever arrives
                    poller.unregister(self._wake)
                    idle = select.POLLIN


def undecodable(line, error):
    """A failed result for the request a line that cannot be decoded answers (e.g. an integer beyond Python's
    digit limit, or too little memory), or no request if the line does not say which."""
    match = RESULT_PREFIX.match(line)
    if match is None:
        return None, None
    reason = f"the result ({len(line)} bytes) could not be decoded in the program: {type(error).__name__}: {error}"
    return {"ok": False, "error": reason}, int(match.group(1))


class OutputSink:
    """Forwards program output as `output` messages, all of it: the server keeps the head and the tail within
    max_output_bytes, so the last thing a program prints survives a flood before it."""

    def __init__(self, channel):
        self._channel = channel

    def forward(self, text):
        if text:
            self._channel.send({"type": "output", "data": text})


class DirectOutput(io.RawIOBase):
    """Raw stream under sys.stdout/sys.stderr: each write goes straight to the server, so what a program printed
    is not left in a pipe if it crashes. fileno() still names fd 1/2, whose writes the drain thread forwards."""

    def __init__(self, sink, fd, drain):
        super().__init__()
        self._sink = sink
        self._fd = fd
        self._drain = drain
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def writable(self):
        return True

    def fileno(self):
        return self._fd

    def write(self, data):
        data = bytes(data)
        # What went to fds 1/2 before this write (os.write, C code) goes out first: output stays in order. The
        # pipe holds at most 64 KiB, so this is quick; the deadline only bounds a writer that never stops.
        self._drain.drain(deadline=time.monotonic() + ORDERING_DRAIN_SECONDS)
        for start in range(0, len(data), READ_CHUNK):  # messages of at most 64 KiB
            self._sink.forward(self._decoder.decode(data[start:start + READ_CHUNK]))
        return len(data)


def take_over_fds():
    """Move the channel off fds 0/1, send everything written to fds 1/2 into a pipe we drain, and make
    sys.stdout/sys.stderr write straight to the server."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    os.set_inheritable(in_fd, False)  # os.dup already does this; be explicit, children must not inherit
    os.set_inheritable(out_fd, False)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)  # only fds 1/2 may hold the write end, so pointing them away gives the drain EOF
    os.close(null)
    channel = Channel(in_fd, out_fd)
    sink = OutputSink(channel)
    drain = FdDrain(sink, read_end)
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
    streams = [io.TextIOWrapper(DirectOutput(sink, fd, drain), encoding="utf-8", errors="backslashreplace",
                                line_buffering=True)
               for fd in (1, 2)]
    sys.stdout = sys.__stdout__ = streams[0]
    sys.stderr = sys.__stderr__ = streams[1]
    return channel, drain, streams


class FdDrain:
    """Forwards what is written to fds 1/2 (os.write, C code, children) from the pipe behind them: a thread drains
    it as data arrives, and finish() drains the rest itself under the same lock, so nothing is lost, reordered or
    waited for."""

    def __init__(self, sink, fd):
        os.set_blocking(fd, False)
        self._sink = sink
        self._fd = fd
        self._lock = threading.Lock()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # keeps split multi-byte chars
        self._eof = False

    def run(self):
        while not self._eof:
            try:
                select.select([self._fd], [], [])
            except (OSError, ValueError):  # the program closed our fd
                return
            self.drain(deadline=None)

    def drain(self, deadline):
        """Forward what the pipe holds now (until `deadline`, as a writer kept alive by the program may never stop)."""
        with self._lock:
            while not self._eof and (deadline is None or time.monotonic() < deadline):
                try:
                    chunk = os.read(self._fd, READ_CHUNK)
                except BlockingIOError:
                    return
                except OSError:
                    chunk = b""
                self._eof = not chunk
                self._sink.forward(self._decoder.decode(chunk, final=self._eof))


class Run:
    """The `run` message: the program, its tools and settings."""

    def __init__(self, message):
        if type(message) is not dict or message.get("type") != "run":
            raise ValueError("expected a JSON object of type run")
        code, tools, limit = message.get("code"), message.get("tools"), message.get("max_output_bytes")
        not_callable, down, precheck = message.get("not_callable"), message.get("down"), message.get("precheck")
        attach_limit, progress = message.get("max_attachment_bytes"), message.get("progress")
        session = message.get("session")
        if (type(code) is not str or type(tools) is not list or not all(type(t) is dict for t in tools)
                or not is_text_map(not_callable) or not is_text_map(down) or type(precheck) is not bool
                or type(progress) is not bool or type(limit) is not int or limit < 0
                or type(attach_limit) is not int or attach_limit < 0
                or not (session is None or (type(session) is dict and type(session.get("cpu_seconds")) is int
                                            and session["cpu_seconds"] > 0))):
            raise ValueError("expected {type: run, code: str, tools: [object], not_callable: {str: str}, "
                             "down: {str: str}, precheck: bool, progress: bool, max_output_bytes: int >= 0, "
                             "max_attachment_bytes: int >= 0, session?: {cpu_seconds: int > 0}}")
        try:
            self.toolbox = Toolbox(tools, not_callable, down)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"a tool without {e}") from None
        self.code, self.precheck, self.limit, self.progress = code, precheck, limit, progress
        self.attach_limit = attach_limit
        self.cpu_seconds = None if session is None else session["cpu_seconds"]  # set: a session's run


def is_text_map(value):
    return type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items())


def encoded(value, what):
    """Value as UTF-8 JSON text: a snapshot the program can no longer change or run code in."""
    try:
        return ENCODER.encode(value).encode("utf-8")  # lone surrogates are not valid JSON text
    except (TypeError, ValueError, RecursionError) as e:
        raise TypeError(f"{what} must be JSON-serialisable: {e}") from None


def to_json(value, what):
    """Snapshot value as plain JSON data + its size."""
    text = encoded(value, what)
    return json.loads(text), len(text)


def keyword_args(name, args, kwargs):
    if args:
        raise TypeError(f"{name}() takes keyword arguments only")
    return to_json(kwargs, f"{name}(): arguments")[0]


def request(channel, kind, fields):
    """Send a `helper` or `show` request and wait for its answer on this thread (synchronous by design; EOF on
    the channel ends the process instead); its value, or ToolError."""
    arrived, box = threading.Event(), []

    def deliver(result):  # reader thread
        box.append(result)
        arrived.set()

    request_id = channel.open_request(deliver)
    try:
        channel.send({"type": kind, "id": request_id, **fields})
        arrived.wait()
    finally:
        channel.close_request(request_id)
    return unwrap(box[0])


def unwrap(result):
    if result.get("ok") is True:
        return result.get("value")
    raise ToolError(str(result.get("error", "failed without a message")))


class _ReadyAwaitable:
    """`await x` gives x back at once, so helpers work both with and without await."""
    __slots__ = ()

    def __await__(self):
        return self
        yield  # unreachable; makes __await__ a generator


class HelperList(_ReadyAwaitable, list):
    __slots__ = ()


class HelperDict(_ReadyAwaitable, dict):
    __slots__ = ()


class HelperStr(_ReadyAwaitable, str):
    __slots__ = ()


READY_TYPES = {list: HelperList, dict: HelperDict, str: HelperStr}


class CallBook:
    """What the run's tool calls did, for errors that teach and for show(): how many tool coroutines were
    made and how many started (a difference is a call never awaited), the values they gave the program, and
    the results that carry images or audio (call id, the value the program got, the placeholders of its
    blocks in order)."""

    def __init__(self):
        self.created = 0
        self.started = 0
        self.results = Results()
        self.with_media = []

    def media_of(self, obj):
        """(call id, block indices) that show(obj) means, or None."""
        for call_id, value, media in reversed(self.with_media):
            notes = value.get("_notes") if type(value) is dict else None
            if obj is value or (notes is not None and obj is notes):
                return call_id, list(range(len(media)))
            if type(notes) is list and type(obj) is str:
                for position, note in enumerate(notes):
                    if note is obj:  # the k-th note with this text is the k-th block with it
                        return call_id, [nth_index(media, obj, notes[:position].count(obj))]
        if type(obj) is str:  # an equal string that is no note itself: the latest block with that placeholder
            for call_id, _, media in reversed(self.with_media):
                if obj in media:
                    return call_id, [media.index(obj)]
        return None


def nth_index(items, item, n):
    """The index of the n-th (from 0) occurrence of item in items (the last one if there are fewer)."""
    found = [i for i, x in enumerate(items) if x == item]
    return found[min(n, len(found) - 1)] if found else 0


def program_line():
    """The line of the program's innermost frame that called the tool (None when the call came from elsewhere)."""
    frame = sys._getframe(2)  # program_line <- tool <- its caller
    while frame is not None and frame.f_code.co_filename != PROGRAM:
        frame = frame.f_back
    return None if frame is None else frame.f_lineno


class _LastLoop(threading.local):
    loop = None


_LAST_LOOP = _LastLoop()


def runs_here(loop):
    """Whether `loop` is running in this thread, as asyncio records it (a loop of another kind: never)."""
    return getattr(loop, "_thread_id", None) == threading.get_ident()


def running_loop():
    """asyncio.get_running_loop() without its getpid() system call, once a call: the loop this thread last ran
    is still the one running while asyncio says it runs here (only one loop can run in a thread)."""
    loop = _LAST_LOOP.loop
    if not runs_here(loop):
        loop = _LAST_LOOP.loop = asyncio.get_running_loop()
    return loop


def make_tool(channel, spec, book):
    name = spec.name
    quoted = ENCODER.encode(name).encode("utf-8")

    async def call(arguments, line):
        book.started += 1
        loop = running_loop()  # whichever loop awaits us: top-level or the program's asyncio.run
        future = loop.create_future()

        def settle(result):
            if not future.done():  # the program may have cancelled the call
                future.set_result(result)

        def deliver(result):  # on whichever thread read it
            if runs_here(loop):  # the loop read it itself (so it runs, so it is open)
                settle(result)
                return
            try:
                loop.call_soon_threadsafe(settle, result)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass

        request_id = channel.open_request(deliver, loop)
        try:
            # The arguments were encoded when the call was written; the line is put together around them.
            at = b"" if line is None else b',"line":%d' % line
            channel.send_line(b'{"type":"call","id":%d,"tool":%s,"args":%s%s}\n' % (request_id, quoted, arguments, at))
            result = await future
        finally:
            if not future.done() or future.cancelled():  # a result was settled (forgotten) as it arrived
                channel.close_request(request_id)
        value = unwrap(result)
        book.results.add(value, name, line)
        media = result.get("media")
        if type(media) is list and media and all(type(m) is str for m in media):
            book.with_media.append((request_id, value, media))
        return value

    call.__name__ = call.__qualname__ = name  # "coroutine 'mcp__s__t' was never awaited" names the tool

    def tool(*args, **kwargs):
        arguments = encoded(spec.bind(args, kwargs), f"{name}(): arguments")
        book.created += 1
        book.results.forget_dropped()  # before this call's result arrives: never two results held for one
        # The line is taken where the call is written (the coroutine may be awaited elsewhere, e.g. in gather).
        return call(arguments, program_line())

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = spec.doc
    tool.__signature__ = spec.signature
    mark_coroutine_function(tool)
    return tool


def mark_coroutine_function(function):
    """Lets inspect/asyncio.iscoroutinefunction see a function that returns a coroutine as async."""
    if hasattr(inspect, "markcoroutinefunction"):  # 3.12+
        inspect.markcoroutinefunction(function)
    marker = getattr(asyncio.coroutines, "_is_coroutine", None)  # what asyncio checks before 3.12
    if marker is not None:
        function._is_coroutine = marker


def make_helper(channel, name, doc):
    def helper(*args, **kwargs):
        arguments = keyword_args(name, args, kwargs)
        value = request(channel, "helper", {"name": name, "args": arguments})
        ready = READY_TYPES.get(type(value))
        return value if ready is None else ready(value)

    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = doc + " Keyword arguments only; works with or without await; raises ToolError on failure."
    return helper


def make_show(channel, book):
    def show(obj):
        """Attach the images and audio of a tool result (or of one of its '[non-text content omitted: ...]'
        placeholders) to this run's result, after its text. What does not fit the limits is left out, and
        show() prints what."""
        found = book.media_of(obj)
        if found is None:
            raise ValueError("show() takes a tool result that carries images or audio, or one of its "
                             "'[non-text content omitted: ...]' placeholders; got " + type(obj).__name__)
        call_id, blocks = found
        answer = request(channel, "show", {"call": call_id, "blocks": blocks})
        left_out = answer.get("left_out") if type(answer) is dict else None
        if left_out:
            print(f"[show(): left out {left_out}]")

    return show


def make_attach(channel, workdir, mounts, limit):
    mime_types = []  # mimetypes' own table, made on first use
    # Where each mount leads, found before the program runs (it may replace the links).
    mounts = [(os.path.realpath(os.path.join(workdir, mount)), mount) for mount in mounts]

    def attach(path, mime_type=None):
        """Return a file of the working directory to the client with this run's result, as an embedded
        resource: text for text types, else base64. mime_type ('type/subtype') is guessed from the file's name
        when not given. What does not fit max_attachments / max_attachment_bytes is left out, and attach()
        prints what."""
        if mime_type is not None and (type(mime_type) is not str or not MIME_TYPE.fullmatch(mime_type)):
            raise ValueError("attach(): mime_type must look like 'text/csv' (letters, digits and !#$&^_.+- on "
                             f"each side of the '/', at most 64 each); got {short_repr(mime_type)}")
        name, fd, size = attachment_file(path, workdir, mounts)
        try:
            data, size = read_at_most(fd, limit, size)
        finally:
            os.close(fd)
        fields = {"name": name, "mime_type": mime_type or guess_mime_type(name, mime_types), "size": size}
        if data is not None:
            fields["data"] = base64.b64encode(data).decode("ascii")
        answer = request(channel, "attach", fields)
        left_out = answer.get("left_out") if type(answer) is dict else None
        if left_out:
            print(f"[attach(): left out {left_out}]")

    return attach


def attachment_file(path, workdir, mounts=()):
    """(name, fd, size) of the file attach(path) means: `path` is taken as open() takes it and must lead, all
    symlinks followed, to a regular file inside the working directory or a mount's folder (`mounts`: (real
    path, name) pairs; a mount is a symlink out under none and seatbelt); `name` is where, relative to the
    working directory. The file is opened without blocking (a FIFO must not hang the run)."""
    given = os.fspath(path)
    if type(given) is not str:
        raise TypeError(f"attach(): path must be a str or a path, got {type(path).__name__}")
    root = os.path.realpath(workdir)
    real = os.path.realpath(given)
    roots = [*mounts, (root, "")]
    inside = [(top, prefix) for top, prefix in roots if os.path.commonpath([top, real]) == top]
    if not inside:
        raise ValueError(f"attach(): {given!r} is outside the working directory ({root}): only its files (symlinks "
                         "followed) can be attached")
    top, prefix = inside[0]
    name = os.path.normpath(os.path.join(prefix, os.path.relpath(real, top)))
    if len(name.encode("utf-8", "surrogateescape")) > MAX_ATTACH_NAME:
        raise ValueError(f"attach(): the path is longer than {MAX_ATTACH_NAME} bytes")
    kind = os.stat(real).st_mode  # FileNotFoundError and the like say themselves what is wrong
    if not stat.S_ISREG(kind):
        what = "a directory" if stat.S_ISDIR(kind) else "not a regular file (a FIFO, a socket or a device)"
        raise ValueError(f"attach(): {given!r} is {what}: only regular files can be attached")
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(fd)  # what was opened, should the path have changed since
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"attach(): {given!r} is not a regular file: only regular files can be attached")
    except BaseException:
        os.close(fd)
        raise
    return name, fd, status.st_size


def read_at_most(fd, limit, size):
    """(the file's bytes or None when it holds more than `limit`, its size): a file that grows while it is read
    is read no further than that."""
    if size > limit:
        return None, size
    chunks, total = [], 0
    while total <= limit:
        chunk = os.read(fd, min(LINE_READ_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks), total
        chunks.append(chunk)
        total += len(chunk)
    return None, total


def guess_mime_type(name, table):
    """The MIME type of a file from its name, by the table Python ships (never the host's files, so that every
    sandbox guesses the same); compressed files are their compression's type."""
    if not table:
        import mimetypes  # only when asked: most programs attach nothing
        try:
            table.append(mimetypes.MimeTypes())
        except OSError:  # its first use reads the host's tables, which a sandbox may deny; then never again
            table.append(mimetypes.MimeTypes())
    guessed, encoding = table[0].guess_type(name)
    if encoding is not None:
        guessed = "application/gzip" if encoding == "gzip" else None
    return guessed if guessed is not None and MIME_TYPE.fullmatch(guessed) else "application/octet-stream"


def make_help(tools):
    def help(*args, **kwargs):
        """help(mcp__server__tool) shows a tool's signature and description; help(x) is pydoc's help."""
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType) and args[0] in tools:
            print(tools[args[0]], end="")  # the signature's text ends with its newline
            return None
        if not args and not kwargs:
            print("Tools are async functions: list_callable_tools(query='...', detail='signatures') finds them "
                  "with their arguments; help(mcp__server__tool) or inspect_tool(tool_name=..., format='python') "
                  "shows one.")
            return None
        import pydoc  # only when asked: it takes a while to import
        return pydoc.help(*args, **kwargs)

    return help


def make_emit(channel, limit):
    def emit(value):
        """Report value (JSON-serialisable) as the program's result; the last call wins."""
        data, size = to_json(value, "emit(): value")
        if size > limit:
            raise ValueError(f"emit(): value is {size} bytes as JSON, over the limit of {limit} bytes")
        channel.send({"type": "emit", "value": data})

    return emit


class ProgressSender:
    """Sends `progress` messages at most every PROGRESS_INTERVAL; one that comes sooner waits for its turn on a
    thread of its own (started at the first such), and a later one replaces it: the latest always goes."""

    def __init__(self, channel):
        self._channel = channel
        self._lock = threading.Lock()
        self._pending = None
        self._sent_at = float("-inf")
        self._wake = threading.Event()
        self._thread = None  # False once a thread could not be started: then each message goes at once

    def send(self, message):
        with self._lock:
            if self._thread is not False and time.monotonic() < self._sent_at + PROGRESS_INTERVAL:
                self._pending = message
                if self._thread is None:
                    self._thread = self._start_thread()
                if self._thread:
                    self._wake.set()
                    return
            self._pending = None
            self._sent_at = time.monotonic()
            self._channel.send(message)

    def _start_thread(self):
        thread = threading.Thread(target=self._send_pending, name="ptc-progress", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread left (a limit on processes): send at once instead
            return False
        return thread

    def _send_pending(self):
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                turn = self._sent_at + PROGRESS_INTERVAL - time.monotonic()
            if turn > 0:
                time.sleep(turn)
            with self._lock:
                message, self._pending = self._pending, None
                if message is not None:
                    self._sent_at = time.monotonic()
                    self._channel.send(message)


def make_progress(channel, wanted):
    sender = ProgressSender(channel) if wanted else None

    def progress(message, fraction=None):
        """Tell the client how the run is going, as a progress notification if it asked for them: message (a str
        of at most 1024 bytes as UTF-8) and optionally fraction, the share done from 0 to 1. The server sends at
        most four notifications a second: the latest call wins."""
        if not isinstance(message, str):
            raise TypeError(f"progress(): message must be a str, not {type(message).__name__}")
        size = len(message.encode("utf-8", "replace"))
        if size > PROGRESS_MESSAGE_BYTES:
            raise ValueError(f"progress(): message is {size} bytes as UTF-8, over the limit of "
                             f"{PROGRESS_MESSAGE_BYTES} bytes")
        if fraction is not None:
            if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
                raise TypeError(f"progress(): fraction must be a number from 0 to 1 or None, "
                                f"not {type(fraction).__name__}")
            if not 0 <= fraction <= 1:  # NaN fails too
                raise ValueError(f"progress(): fraction must be from 0 to 1 (the share done), got {fraction!r}")
            fraction = float(fraction)
        if sender is not None:
            sender.send({"type": "progress", "message": message, "fraction": fraction})

    return progress


def make_globals(channel, toolbox, book, limit, attach, wanted_progress, kept=None):
    """The program's __main__ module (so pickle, dataclasses, `import __main__` see the program), and the tools
    bound in it: a fresh module, or with `kept` a session's (module, tools) from its earlier runs, whose tools and
    helpers are rebound for this run (a tool no longer callable is unbound, unless the program rebound its name)."""
    module, earlier = kept if kept is not None else (types.ModuleType("__main__"), {})
    sys.modules["__main__"] = module
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    for name, tool in earlier.items():
        if name not in toolbox.tools and namespace.get(name) is tool:
            del namespace[name]
    signatures, tools = {}, {}
    for name, spec in toolbox.tools.items():
        tool = make_tool(channel, spec, book)
        namespace[name] = tools[name] = tool
        signatures[tool] = spec.doc
    namespace.update(
        ToolError=ToolError,
        emit=make_emit(channel, limit),
        show=make_show(channel, book),
        attach=attach,
        progress=make_progress(channel, wanted_progress),
        help=make_help(signatures),
        list_callable_tools=make_helper(
            channel, "list_callable_tools",
            "List the tools this program may call: list_callable_tools(query=None, detail='names', limit=None); "
            "a query ranks them, detail='signatures' gives their Python signatures."),
        inspect_tool=make_helper(
            channel, "inspect_tool",
            "Describe one tool: inspect_tool(tool_name=..., format='json'); format='python' gives its signature."),
        server_status=make_helper(channel, "server_status", "Report the server's status and budgets."),
    )
    return module, tools


def run_program(code, tree, namespace, limit, teach):
    """Run the program (from its syntax tree when the check already parsed it); return None on success, else
    the `done` error object (its text within `limit`). teach(exc) adds what the runner knows to an error's
    message."""
    register_source(code)
    try:
        source = code if tree is None else tree
        compiled = compile(source, PROGRAM, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        result = eval(compiled, namespace)
        if asyncio.iscoroutine(result):  # the program uses top-level await
            run_coroutine(result)
    except SystemExit as e:
        if e.code is None or (type(e.code) in (int, bool) and e.code == 0):
            return None
        return describe(e, code, limit, teach)
    except BaseException as e:  # KeyboardInterrupt & co. are program errors too
        return describe(e, code, limit, teach)
    return None


def run_coroutine(coroutine):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(coroutine)
    finally:
        try:  # leftover tasks get one short chance to finish cancelling, then the loop is gone
            leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.wait(leftovers, timeout=0.1))
            loop.close()
        except BaseException:
            pass
        asyncio.set_event_loop(None)


def register_source(code):
    # linecache can't read "<program>" from disk; an entry with mtime None is never invalidated.
    linecache.cache[PROGRAM] = (len(code), None, code.splitlines(True), PROGRAM)


def describe(exc, code, limit, teach):
    register_source(code)  # the program may have cleared linecache
    try:
        message = format_chain(exc, set(), teach)
    except BaseException:  # hostile __str__ and the like: still say what it was
        message = f"{type(exc).__name__}: <unprintable>\n"
    return {"kind": type(exc).__name__[:200], "message": clip(message, limit)}


def clip(text, limit):
    """The head and tail of text within about `limit` characters (the server cuts to its byte budget again)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[len(text) - half:]}"


def format_chain(exc, seen, teach):
    """Like traceback.format_exception, oldest first, but showing only the program's frames, each exception
    followed by what teach(exc) adds."""
    parts = []
    while True:
        seen.add(id(exc))
        notes = teach(exc)
        parts.append(format_one(exc, seen, teach) + "".join(note + "\n" for note in notes))
        if exc.__cause__ is not None:
            link, following = CAUSE, exc.__cause__
        elif exc.__context__ is not None and not exc.__suppress_context__:
            link, following = CONTEXT, exc.__context__
        else:
            break
        if id(following) in seen:
            break
        parts.append(link)
        exc = following
    return "".join(reversed(parts))


def format_one(exc, seen, teach):
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == PROGRAM]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.StackSummary.from_list(frames).format()
    lines += traceback.format_exception_only(type(exc), exc)  # also renders SyntaxError with its caret
    if isinstance(exc, EXCEPTION_GROUPS):  # e.g. asyncio.TaskGroup: show what actually failed
        for number, sub in enumerate(exc.exceptions, 1):
            lines.append(f"  [sub-exception {number} of {len(exc.exceptions)}]\n")
            lines += ["    " + line for line in format_chain(sub, seen, teach).splitlines(True)]
    return "".join(lines)


NOT_DEFINED = re.compile(r"name '(mcp__\w+)' is not defined")
AWAIT_HINT = " (did you forget `await`? a tool call gives a coroutine until awaited: x = await mcp__s__t(...))"


def make_teacher(toolbox, book, code, workdir):
    """teach(exc): a NameError on an `mcp__` name says why it is no tool; a TypeError or AttributeError about
    a coroutine, while some tool call was never awaited, asks about `await`: the message is changed in place
    (once), so the traceback shows it. Returns the lines to show after the exception's (explain.py)."""
    def teach(exc):
        amend(exc)
        return explain(exc, code, PROGRAM, book.results, workdir)

    def amend(exc):
        if getattr(exc, "_ptc_taught", False) or len(exc.args) != 1 or type(exc.args[0]) is not str:
            return
        message = exc.args[0]
        if isinstance(exc, NameError):
            match = NOT_DEFINED.fullmatch(message)
            if match is None:
                return
            exc.args = (f"{message}: {toolbox.why_unknown(match.group(1))}",)
            if getattr(exc, "name", None) is not None:
                exc.name = None  # our closest names replace Python's "Did you mean" (3.10+)
        elif isinstance(exc, (TypeError, AttributeError)) and "'coroutine'" in message and book.created > book.started:
            exc.args = (message + AWAIT_HINT,)
        else:
            return
        exc._ptc_taught = True

    return teach


def checked(run):
    """(error, tree): the `done` error for a program whose tool calls cannot all work (None to run it), and
    the syntax tree the check parsed (None without the check, or if the program does not parse)."""
    if not run.precheck:
        return None, None
    findings, tree = precheck(run.code, run.toolbox)
    if not findings:
        return None, tree
    lines = "\n".join(findings)
    return {"kind": "PrecheckError",
            "message": clip(f"{lines}\n(checked before running: nothing ran, no tool was called)\n", run.limit)}, tree


def flush_output(streams):
    for stream in (sys.stdout, sys.stderr, *streams):
        try:
            stream.flush()
        except BaseException:  # closed, replaced or hostile streams
            pass


def hand_back(channel, drain, streams, error):
    """A session's run is over: flush and forward its output, send done, and wait for the next run (what the
    program left running may still print: that goes out with the next run)."""
    flush_output(streams)
    drain.drain(deadline=time.monotonic() + FINAL_DRAIN_SECONDS)
    channel.await_next_run()
    channel.send({"type": "done", "error": error})


def rearm_cpu(seconds):
    """A session's run may use `seconds` of CPU time beyond what its interpreter used so far (SIGXCPU ends the
    session past them), within the hard limit the sandbox set for the session's whole life."""
    try:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(usage.ru_utime + usage.ru_stime) + 1 + seconds
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (OSError, ValueError):  # the program lowered the hard limit below its use: SIGXCPU decides
        pass


def finish(channel, drain, streams, error):
    """Flush program output, point fds 1/2 away from the pipe, forward what it still holds, send done."""
    flush_output(streams)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    drain.drain(deadline=time.monotonic() + FINAL_DRAIN_SECONDS)
    channel.send({"type": "done", "error": error}, last=True)
    os._exit(0)  # never wait for threads the program left behind


def main():
    options = runner_options()
    serve(options, *prepare_packages(options))  # before the channel exists: what imports print stays off it


def serve(options, site_shown, preload_failed):
    """Runs the run messages that arrive on fds 0/1 (the runner's, or a zygote's fork's, once confined)."""
    global MODULE_HINT
    workdir = os.getcwd()  # the program may change it: hints about host files use the one it started in
    if site_shown:
        MODULE_HINT = SITE_MODULE_HINT
    channel, drain, streams = take_over_fds()
    # Both threads start before `ready`, so a run never waits for one to be scheduled.
    threading.Thread(target=drain.run, name="ptc-output", daemon=True).start()
    threading.Thread(target=channel.serve_results, name="ptc-reader", daemon=True).start()
    channel.send({"type": "ready", "version": PROTOCOL_VERSION})
    kept = None  # a session's module and tools, from its earlier runs
    while True:
        try:
            run = Run(channel.receive_run())
        except Exception as e:
            channel.send({"type": "done", "error": {"kind": "ProtocolError", "message": f"bad run message: {e}"}},
                         last=True)
            os._exit(0)
        if run.cpu_seconds is not None:
            rearm_cpu(run.cpu_seconds)
        if preload_failed:
            error = {"kind": "PreloadError", "message": preload_failed + "\n"}
        else:
            error, tree = checked(run)
        if error is None:
            book = CallBook()
            attach = make_attach(channel, workdir, options.get("mounts", ()), run.attach_limit)
            kept = make_globals(channel, run.toolbox, book, run.limit, attach, run.progress, kept)
            teach = make_teacher(run.toolbox, book, run.code, workdir)
            error = run_program(run.code, tree, kept[0].__dict__, run.limit, teach)
        if run.cpu_seconds is None:
            finish(channel, drain, streams, error)
        hand_back(channel, drain, streams, error)


if not globals().get("AS_ZYGOTE"):  # the zygote (zygote.py) forks runners that call serve()
    main()
