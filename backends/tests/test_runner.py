"""Tests for backends/src/runner.py: this file plays the server and checks the protocol (PROTOCOL.md).

Run with: python3 -m unittest discover -s backends/tests -v
"""
import json
import os
import pathlib
import queue
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

from runner_source import RUNNER_SOURCE, run_message

MESSAGE_TYPES = {"ready", "output", "call", "helper", "show", "attach", "emit", "progress", "done"}


class Runner:
    """One runner process, started exactly as a backend does, with line-level access to its channel."""

    def __init__(self, options=None, setup=None):
        """`options`: the runner's options argument (execution.site_packages and preload), as a dict; `setup`
        is called with the working directory before the runner starts."""
        self.tmp = tempfile.TemporaryDirectory()
        if setup is not None:
            setup(self.tmp.name)
        extra = [] if options is None else [json.dumps(options)]
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", RUNNER_SOURCE, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={}, cwd=self.tmp.name,
        )
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.append(self.proc.stderr.read()), daemon=True).start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def recv(self, timeout=10):
        """Next message (strictly one JSON object per line with a known type), or None at EOF."""
        line = self.lines.get(timeout=timeout)
        if line is None:
            return None
        assert line.endswith(b"\n"), line
        message = json.loads(line.decode("utf-8"))
        assert type(message) is dict and message.get("type") in MESSAGE_TYPES, message
        return message

    def send(self, message):
        """Sends a message as the server does (compact JSON), or a str as the raw line."""
        line = message if type(message) is str else json.dumps(message, separators=(",", ":"))
        self.proc.stdin.write(line.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def close(self):
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()
        self.tmp.cleanup()


def ok(request, value):
    return {"type": "result", "id": request["id"], "ok": True, "value": value}


def fail(request, error):
    return {"type": "result", "id": request["id"], "ok": False, "error": error}


def without_carets(text):
    """A traceback without the lines of `^`/`~` markers, which differ between Python versions (3.11+ add them,
    3.13 for more expressions)."""
    return "".join(line for line in text.splitlines(True) if not (line.strip() and set(line.strip()) <= set("^~")))


class RunnerTest(unittest.TestCase):
    def start(self, options=None, setup=None):
        runner = Runner(options, setup)
        self.addCleanup(runner.close)
        self.assertEqual(runner.recv(), {"type": "ready", "version": 4})
        return runner

    def run_program(self, code, tools=(), answer=None, max_output_bytes=65536, runner=None, **run):
        """Run code to its end. answer(request) returns the result message, or None to answer later by hand.
        Returns every message after `ready` up to `done`; asserts nothing follows `done` and the exit is 0.
        `tools` and `run` (not_callable, down, precheck) as for runner_source.run_message."""
        runner = runner or self.start()
        runner.send(run_message(textwrap.dedent(code), tools, max_output_bytes, **run))
        messages = []
        while True:
            message = runner.recv(timeout=15)
            if message is None:  # the message is formatted only then: it holds every message so far
                self.fail(f"EOF before done; got {messages}, stderr {runner.stderr}")
            messages.append(message)
            if message["type"] == "done":
                break
            if message["type"] in ("call", "helper", "show", "attach") and answer is not None:
                reply = answer(message)
                if reply is not None:
                    runner.send(reply)
        self.assertIsNone(runner.recv(timeout=10), "nothing may follow done")
        self.assertEqual(runner.proc.wait(timeout=10), 0)
        return messages

    @staticmethod
    def output(messages):
        return "".join(m["data"] for m in messages if m["type"] == "output")

    @staticmethod
    def of_type(messages, kind):
        return [m for m in messages if m["type"] == kind]

    def assert_success(self, messages):
        self.assertEqual(messages[-1], {"type": "done", "error": None}, self.output(messages))

    def error_of(self, messages):
        error = messages[-1]["error"]
        self.assertIsNotNone(error, self.output(messages))
        self.assertEqual(set(error), {"kind", "message"})
        self.assertNotIn("<string>", error["message"])  # runner frames never show
        return dict(error, message=without_carets(error["message"]))

    # --- start-up and output -------------------------------------------------------------------

    def test_ready_is_sent_before_run(self):
        self.start()  # start() asserts the first message is ready, before we send anything

    def test_print_goes_to_output(self):
        messages = self.run_program("""
            import sys
            print("hello")
            print("to stderr", file=sys.stderr)
            sys.stdout.write("no newline")
        """)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "hello\nto stderr\nno newline")

    def test_os_write_to_fds_1_and_2_is_output_not_channel(self):
        messages = self.run_program("""
            import os
            os.write(1, b'{"type":"done","error":null}\\n')
            os.write(2, b"raw stderr\\n")
        """)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), '{"type":"done","error":null}\nraw stderr\n')
        self.assertEqual(len(self.of_type(messages, "done")), 1)

    def test_forged_json_from_print_stays_inside_output(self):
        forged = '{"type":"call","id":1,"tool":"mcp__s__t","args":{}}'
        messages = self.run_program(f"""
            print({forged!r})
            print('{{"type":"emit","value":42}}', flush=True)
        """)
        self.assert_success(messages)
        self.assertEqual({m["type"] for m in messages}, {"output", "done"})
        self.assertIn(forged, self.output(messages))

    def test_multibyte_characters_split_across_writes(self):
        messages = self.run_program("""
            import os, time
            data = "é€😀".encode()
            for i in range(len(data)):
                os.write(1, data[i:i + 1])
                time.sleep(0.01)
        """)
        self.assertEqual(self.output(messages), "é€😀")

    def test_all_output_is_forwarded_whatever_the_cap_the_server_keeps_head_and_tail(self):
        messages = self.run_program("""
            for i in range(20000):
                print("x" * 99)
            print("last words")
        """, max_output_bytes=1000)
        self.assert_success(messages)
        out = self.output(messages)
        self.assertEqual(len(out), 20000 * 100 + len("last words\n"))
        self.assertTrue(out.endswith("x\nlast words\n"))

    def test_prints_and_fd_writes_arrive_in_the_order_the_program_made_them(self):
        messages = self.run_program("""
            import os
            for i in range(200):
                os.write(1, b"fd %d\\n" % i)
                print("print", i)
        """)
        self.assert_success(messages)
        expected = "".join(f"fd {i}\nprint {i}\n" for i in range(200))
        self.assertEqual(self.output(messages), expected)

    def test_one_huge_print_goes_out_in_chunks_of_at_most_64_kib(self):
        messages = self.run_program("print('y' * 5_000_000)")
        self.assert_success(messages)
        chunks = [m["data"] for m in self.of_type(messages, "output")]
        self.assertEqual("".join(chunks), "y" * 5_000_000 + "\n")
        self.assertLessEqual(max(map(len, chunks)), 65536)

    # --- tools ----------------------------------------------------------------------------------

    def test_tool_call_with_top_level_await(self):
        messages = self.run_program("""
            result = await mcp__s__t(x=1, s="é")
            print(result["y"])
        """, tools=["mcp__s__t"], answer=lambda r: ok(r, {"y": 2}))
        self.assert_success(messages)
        self.assertEqual(self.of_type(messages, "call"),
                         [{"type": "call", "id": 1, "tool": "mcp__s__t", "args": {"x": 1, "s": "é"}, "line": 2}])
        self.assertEqual(self.output(messages), "2\n")

    def test_each_call_names_the_program_line_it_was_written_on(self):
        messages = self.run_program("""
            import asyncio
            async def fetch(i):
                return await mcp__s__t(i=i)
            await asyncio.gather(
                mcp__s__t(i=0),
                fetch(1),
            )
        """, tools=["mcp__s__t"], answer=lambda r: ok(r, {}))
        self.assert_success(messages)
        lines = {c["args"]["i"]: c["line"] for c in self.of_type(messages, "call")}
        self.assertEqual(lines, {0: 6, 1: 4})

    def test_tool_error_can_be_caught(self):
        messages = self.run_program("""
            try:
                await mcp__s__t()
            except ToolError as e:
                print("caught:", e, isinstance(e, Exception))
        """, tools=["mcp__s__t"], answer=lambda r: fail(r, "boom"))
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "caught: boom True\n")

    def test_uncaught_tool_error(self):
        messages = self.run_program("""
            x = 1
            await mcp__s__t(q="a")
        """, tools=["mcp__s__t"], answer=lambda r: fail(r, "no such thing"))
        error = self.error_of(messages)
        self.assertEqual(error["kind"], "ToolError")
        self.assertEqual(error["message"], 'Traceback (most recent call last):\n'
                                           '  File "<program>", line 3, in <module>\n'
                                           '    await mcp__s__t(q="a")\n'
                                           'ToolError: no such thing\n')

    def test_a_result_the_program_cannot_decode_fails_that_call_and_no_other(self):
        digits = "1" * 5000  # over Python's integer-digit limit (3.11+, and 3.9/3.10 security releases)

        def answer(request):
            if request["args"].get("huge"):
                return f'{{"type":"result","id":{request["id"]},"ok":true,"value":{digits}}}'
            return ok(request, "fine")

        messages = self.run_program("""
            import sys
            limited = hasattr(sys, "set_int_max_str_digits")
            try:
                await mcp__s__t(huge=True)
                print("decoded", not limited)
            except ToolError as e:
                print("ToolError:", e)
            print(await mcp__s__t())
        """, tools=["mcp__s__t"], answer=answer)
        self.assert_success(messages)
        first, second = self.output(messages).splitlines()
        decode_failed = "ToolError: the result (5043 bytes) could not be decoded in the program: ValueError: "
        self.assertTrue(first.startswith(decode_failed) or first == "decoded True", first)
        self.assertEqual(second, "fine")

    def test_positional_arguments_are_rejected(self):
        messages = self.run_program("await mcp__s__t(1)", tools=["mcp__s__t"], precheck=False)
        error = self.error_of(messages)
        self.assertEqual(error["kind"], "TypeError")
        self.assertTrue(error["message"].endswith(
            "TypeError: mcp__s__t() takes keyword arguments only (got 1 positional argument). "
            "Signature: mcp__s__t(**extra: Any) -> Any\n"), error["message"])
        self.assertEqual(self.of_type(messages, "call"), [])

    def test_arguments_must_be_json_serialisable(self):
        messages = self.run_program("""
            for bad in (object(), float("nan"), "\\udcff"):
                try:
                    await mcp__s__t(x=bad)
                except TypeError as e:
                    print(e)
        """, tools=["mcp__s__t"])
        self.assert_success(messages)
        lines = self.output(messages).splitlines()
        self.assertEqual(len(lines), 3)
        for line in lines:
            self.assertTrue(line.startswith("mcp__s__t(): arguments must be JSON-serialisable: "), line)
        self.assertEqual(self.of_type(messages, "call"), [])

    def test_concurrent_calls_answered_out_of_order(self):
        runner = self.start()
        held = []

        def answer(request):  # hold the first two, then answer all three in reverse order
            held.append(request)
            if len(held) < 3:
                return None
            for r in reversed(held[:2]):
                runner.send(ok(r, r["args"]["n"] * 10))
            return ok(request, request["args"]["n"] * 10)

        messages = self.run_program("""
            import asyncio
            print(await asyncio.gather(mcp__s__t(n=1), mcp__s__t(n=2), mcp__s__u(n=3)))
        """, tools=["mcp__s__t", "mcp__s__u"], answer=answer, runner=runner)
        self.assert_success(messages)
        self.assertEqual([c["id"] for c in self.of_type(messages, "call")], [1, 2, 3])
        self.assertEqual(self.output(messages), "[10, 20, 30]\n")

    def test_results_split_across_writes_or_sharing_one_arrive_whole(self):
        runner = self.start()
        big = "y" * (3 * 1024 * 1024)
        held = []

        def answer(request):  # answer both calls in one go: the big one in pieces, the small one in its last piece
            held.append(request)
            if len(held) < 2:
                return None
            first, second = held
            data = (json.dumps(ok(first, big)) + "\n" + json.dumps(ok(second, "small")) + "\n").encode()
            for start in range(0, len(data), 700_001):
                runner.proc.stdin.write(data[start:start + 700_001])
                runner.proc.stdin.flush()
            return None

        messages = self.run_program("""
            import asyncio
            a, b = await asyncio.gather(mcp__s__t(), mcp__s__t())
            print(len(a), a == "y" * len(a), b)
        """, tools=["mcp__s__t"], answer=answer, runner=runner)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), f"{len(big)} True small\n")

    def test_tools_work_from_sync_code_and_threads_via_asyncio_run(self):
        messages = self.run_program("""
            import asyncio, threading
            print(asyncio.run(mcp__s__t(n=1)))
            box = []
            thread = threading.Thread(target=lambda: box.append(asyncio.run(mcp__s__t(n=2))))
            thread.start(); thread.join()
            print(box)
        """, tools=["mcp__s__t"], answer=lambda r: ok(r, r["args"]["n"]))
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "1\n[2]\n")

    def answer_when_all_arrived(self, runner, count, value=lambda request: request["args"].get("n")):
        """answer() that holds requests until `count` arrived, then answers them all, last first."""
        held = []

        def answer(request):
            held.append(request)
            if len(held) == count:
                for r in reversed(held):
                    runner.send(ok(r, value(r)))
        return answer

    def test_event_loops_in_several_threads_wait_at_once(self):
        # Answers reach calls that wait in the event loops of three threads at once, whatever the order.
        runner = self.start()
        messages = self.run_program("""
            import asyncio, threading
            box = []
            threads = [threading.Thread(target=lambda n=n: box.append(asyncio.run(mcp__s__t(n=n)))) for n in (1, 2)]
            for thread in threads:
                thread.start()
            box.append(await mcp__s__t(n=3))
            for thread in threads:
                thread.join()
            print(sorted(box))
        """, tools=["mcp__s__t"], answer=self.answer_when_all_arrived(runner, 3), runner=runner)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "[1, 2, 3]\n")

    def test_a_helper_waited_for_inside_the_loop_reads_the_loops_answers_too(self):
        runner = self.start()
        messages = self.run_program("""
            import asyncio
            task = asyncio.ensure_future(mcp__s__t(n=1))
            await asyncio.sleep(0.05)  # the call is sent; the loop is then blocked in the helper
            status = server_status()
            print(status, await task)
        """, tools=["mcp__s__t"], answer=self.answer_when_all_arrived(
            runner, 2, lambda r: r["args"]["n"] if r["type"] == "call" else "status"), runner=runner)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "status 1\n")

    def test_a_helper_in_a_thread_and_a_call_in_the_loop_wait_at_once(self):
        runner = self.start()
        messages = self.run_program("""
            import threading
            box = []
            thread = threading.Thread(target=lambda: box.append(server_status()))
            thread.start()
            value = await mcp__s__t(n=1)
            thread.join()
            print(box, value)
        """, tools=["mcp__s__t"], answer=self.answer_when_all_arrived(
            runner, 2, lambda r: r["args"]["n"] if r["type"] == "call" else "status"), runner=runner)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "['status'] 1\n")

    def test_the_loop_reads_its_answers_again_after_others_waited(self):
        # Who reads the channel changes as waiters come and go: calls in the loop alone, then a helper in a
        # thread at the same time, then the loop alone again, then a call from another loop; none is lost.
        runner = self.start()
        messages = self.run_program("""
            import asyncio, threading
            total = sum([await mcp__s__t(n=n) for n in range(20)])
            box = []
            thread = threading.Thread(target=lambda: box.append(server_status()))
            thread.start()
            total += sum(await asyncio.gather(*[mcp__s__t(n=n) for n in range(20)]))
            thread.join()
            total += sum([await mcp__s__t(n=n) for n in range(20)])
            other = threading.Thread(target=lambda: box.append(asyncio.run(mcp__s__t(n=1000))))
            other.start()
            total += await mcp__s__t(n=1)
            other.join()
            print(total, box)
        """, tools=["mcp__s__t"],
            answer=lambda r: ok(r, r["args"]["n"] if r["type"] == "call" else "status"), runner=runner)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "571 ['status', 1000]\n")

    def test_a_late_result_for_a_closed_loop_costs_no_other_call_its_answer(self):
        # A call left waiting in a loop the program closed; its result arrives in one write with the answer a
        # later loop on the same thread waits for. Each round is a race with the reader thread: 20 rounds.
        runner = self.start()
        held = []

        def answer(request):
            held.append(request)
            if request["args"]["k"] == "new":  # both answers in one write, the abandoned call's first
                runner.proc.stdin.write(b"".join(json.dumps(ok(r, r["args"]["k"])).encode() + b"\n" for r in held))
                runner.proc.stdin.flush()
                held.clear()

        messages = self.run_program("""
            import asyncio
            answers, abandoned = [], []
            for _ in range(20):
                old = asyncio.new_event_loop()
                abandoned.append(old.create_task(mcp__s__t(k='old')))  # kept: no warning about its destruction
                old.run_until_complete(asyncio.sleep(0.01))  # the call is sent and waits
                old.close()
                answers.append(asyncio.run(mcp__s__t(k='new')))
            print(answers == ['new'] * 20)
        """, tools=["mcp__s__t"], answer=answer, runner=runner)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "True\n")

    def test_cancelled_call_ignores_its_late_result(self):
        def answer(request):
            time.sleep(0.2)  # answer after the program gave up on the call
            return ok(request, "late")

        messages = self.run_program("""
            import asyncio
            try:
                await asyncio.wait_for(mcp__s__t(), 0.01)
            except asyncio.TimeoutError:  # TimeoutError itself only from 3.11
                print("timed out")
            await asyncio.sleep(0.4)
            print("still fine")
        """, tools=["mcp__s__t"], answer=answer)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "timed out\nstill fine\n")

    def test_tool_function_identity(self):
        messages = self.run_program("""
            import asyncio, inspect, sys
            print(mcp__s__t.__name__, mcp__s__t.__qualname__, asyncio.iscoroutinefunction(mcp__s__t))
            # inspect sees the mark from 3.12 on (a tool is a plain function that checks its arguments at once
            # and returns the call's coroutine)
            print(inspect.iscoroutinefunction(mcp__s__t) or sys.version_info < (3, 12))
            call = mcp__s__t()
            print(inspect.iscoroutine(call), ToolError.__name__)
            call.close()
        """, tools=["mcp__s__t"], answer=lambda r: ok(r, None))
        self.assertEqual(self.output(messages), "mcp__s__t mcp__s__t True\nTrue\nTrue ToolError\n")

    # --- emit and helpers -----------------------------------------------------------------------

    def test_emit_sends_each_value_in_order(self):
        messages = self.run_program("""
            emit(1)
            emit({"a": [1, 2.5, None, "é"]})
            for bad in (object(), float("inf")):
                try:
                    emit(bad)
                except TypeError as e:
                    print("TypeError", "emit" in str(e))
            try:
                emit("z" * 200)
            except ValueError as e:
                print("ValueError", e)
        """, max_output_bytes=100)
        self.assert_success(messages)
        self.assertEqual([m["value"] for m in self.of_type(messages, "emit")], [1, {"a": [1, 2.5, None, "é"]}])
        self.assertEqual(self.output(messages).splitlines()[:2], ["TypeError True", "TypeError True"])
        self.assertIn("ValueError emit(): value is 202 bytes", self.output(messages))

    PROGRESS_CHECKS = """
        for args in [(1,), ("x" * 1025,), ("é" * 513,), ("x", 1.5), ("x", -0.1), ("x", float("nan")), ("x", True),
                     ("x", "0.5"), ("x", 10 ** 30)]:
            try:
                progress(*args)
                print("accepted", args)
            except (TypeError, ValueError) as e:
                print(type(e).__name__, e)
        progress("x" * 1024)
        progress("half", 0.5)
        progress("done", 1)
        progress("no fraction", fraction=None)
        import time
        time.sleep(0.3)
    """

    def test_progress_checks_its_arguments_and_sends_only_when_the_client_wants_progress(self):
        wanted = self.run_program(self.PROGRESS_CHECKS, progress=True)
        self.assert_success(wanted)
        self.assertEqual(self.output(wanted).splitlines(), [
            "TypeError progress(): message must be a str, not int",
            "ValueError progress(): message is 1025 bytes as UTF-8, over the limit of 1024 bytes",
            "ValueError progress(): message is 1026 bytes as UTF-8, over the limit of 1024 bytes",
            "ValueError progress(): fraction must be from 0 to 1 (the share done), got 1.5",
            "ValueError progress(): fraction must be from 0 to 1 (the share done), got -0.1",
            "ValueError progress(): fraction must be from 0 to 1 (the share done), got nan",
            "TypeError progress(): fraction must be a number from 0 to 1 or None, not bool",
            "TypeError progress(): fraction must be a number from 0 to 1 or None, not str",
            "ValueError progress(): fraction must be from 0 to 1 (the share done), got " + str(10 ** 30),
        ])
        # The first at once; the others came within its PROGRESS_INTERVAL: the latest follows when its turn comes.
        self.assertEqual(self.of_type(wanted, "progress"), [
            {"type": "progress", "message": "x" * 1024, "fraction": None},
            {"type": "progress", "message": "no fraction", "fraction": None},
        ])
        unwanted = self.run_program(self.PROGRESS_CHECKS, progress=False)
        self.assert_success(unwanted)
        self.assertEqual(self.output(unwanted), self.output(wanted), "the same checks without a client asking")
        self.assertEqual(self.of_type(unwanted, "progress"), [])

    def test_progress_in_a_tight_loop_sends_at_most_twenty_a_second_and_the_latest(self):
        messages = self.run_program("""
            import time
            start = time.monotonic()
            for i in range(100_000):
                progress(f"step {i}", i / 100_000)
            print(time.monotonic() - start < 5)
            time.sleep(0.3)
            progress("after a pause")
        """, progress=True)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "True\n")
        sent = self.of_type(messages, "progress")
        self.assertEqual(sent[0], {"type": "progress", "message": "step 0", "fraction": 0.0})
        self.assertEqual(sent[-2]["message"], "step 99999", "the latest of the loop went when its turn came")
        self.assertEqual(sent[-1]["message"], "after a pause", "at once after a pause")
        self.assertLess(len(sent), 120, "at most 20 a second for a few seconds")

    def test_helpers_sync_and_awaited(self):
        def answer(request):
            self.assertEqual(request["type"], "helper")
            if request["name"] == "list_callable_tools":
                return ok(request, ["mcp__s__t"])
            if request["name"] == "inspect_tool":
                if request["args"] == {"tool_name": "missing"}:
                    return fail(request, "unknown tool")
                return ok(request, {"name": request["args"]["tool_name"]})
            return ok(request, {"calls_left": 5})

        messages = self.run_program("""
            a = list_callable_tools()
            b = await list_callable_tools()
            c = inspect_tool(tool_name="mcp__s__t")
            d = await server_status()
            print(a, b, c, d, a == ["mcp__s__t"], isinstance(d, dict))
            try:
                inspect_tool(tool_name="missing")
            except ToolError as e:
                print("ToolError", e)
            try:
                inspect_tool("mcp__s__t")
            except TypeError as e:
                print(e)
        """, answer=answer)
        self.assert_success(messages)
        helpers = self.of_type(messages, "helper")
        self.assertEqual([h["id"] for h in helpers], [1, 2, 3, 4, 5])
        self.assertEqual(helpers[2], {"type": "helper", "id": 3, "name": "inspect_tool",
                                      "args": {"tool_name": "mcp__s__t"}})
        self.assertEqual(self.output(messages),
                         "['mcp__s__t'] ['mcp__s__t'] {'name': 'mcp__s__t'} {'calls_left': 5} True True\n"
                         "ToolError unknown tool\n"
                         "inspect_tool() takes keyword arguments only\n")

    def test_calls_and_helpers_share_one_id_sequence(self):
        messages = self.run_program("""
            await mcp__s__t()
            list_callable_tools()
            await mcp__s__t()
        """, tools=["mcp__s__t"], answer=lambda r: ok(r, []))
        self.assert_success(messages)
        self.assertEqual([(m["type"], m["id"]) for m in messages if "id" in m],
                         [("call", 1), ("helper", 2), ("call", 3)])

    def test_program_globals_hold_no_runner_state(self):
        messages = self.run_program("""
            import __main__
            print(sorted(k for k in globals() if not k.startswith("__")))
            print(__name__, __main__.__dict__ is globals(), __builtins__.__name__)
        """, tools=["mcp__s__t"])
        self.assertEqual(self.output(messages),
                         "['ToolError', 'attach', 'emit', 'help', 'inspect_tool', 'list_callable_tools', "
                         "'mcp__s__t', 'progress', 'server_status', 'show']\n__main__ True builtins\n")

    # --- signatures, the check before running, errors that teach, show -------------------------

    QUERY = {
        "name": "mcp__s__query",
        "params": [
            {"name": "ticker", "annotation": "str", "required": True, "types": ["string"]},
            {"name": "from_", "key": "from", "annotation": "str", "required": False, "types": ["string"]},
            {"name": "limit", "annotation": "int", "required": False, "default": 4, "types": ["integer"]},
        ],
        "returns": "Any",
        "doc": "async def mcp__s__query(\n    *,\n    ticker: str,  # Stock ticker\n    from_: str = ...,  # key "
               "\"from\"\n    limit: int = 4,\n) -> Any:  # no output schema: inspect the result\n    \"\"\"Query.\"\"\"\n",
    }

    def test_tool_functions_carry_their_signature_and_help_shows_it(self):
        messages = self.run_program("""
            import inspect
            print(inspect.signature(mcp__s__query))
            print(mcp__s__query.__doc__.splitlines()[0])
            help(mcp__s__query)
            help(len)
        """, tools=[self.QUERY])
        self.assert_success(messages)
        output = self.output(messages)
        self.assertTrue(output.startswith(
            "(*, ticker: str, from_: str = ..., limit: int = 4) -> Any\n"
            "async def mcp__s__query(\n" + self.QUERY["doc"]), output)
        self.assertIn("len(obj, /)", output)  # pydoc's help for everything else

    def test_names_are_sent_under_their_keys(self):
        messages = self.run_program("""
            await mcp__s__query(ticker="A", from_="2020")
            await mcp__s__query(ticker="B", **{"from": "2021"})
        """, tools=[self.QUERY], answer=lambda r: ok(r, None))
        self.assert_success(messages)
        self.assertEqual([c["args"] for c in self.of_type(messages, "call")],
                         [{"ticker": "A", "from": "2020"}, {"ticker": "B", "from": "2021"}])

    def test_a_call_that_cannot_be_right_raises_before_anything_is_sent(self):
        messages = self.run_program("""
            for kwargs in ({"tickr": "A"}, {"limit": 2}):
                try:
                    mcp__s__query(**kwargs)
                except TypeError as e:
                    print(e)
        """, tools=[self.QUERY], precheck=False)
        self.assert_success(messages)
        signature = "Signature: mcp__s__query(*, ticker: str, from_: str = ..., limit: int = 4) -> Any"
        self.assertEqual(self.output(messages),
                         f"mcp__s__query() got an unexpected keyword argument 'tickr'. Did you mean 'ticker'? "
                         f"{signature}\nmcp__s__query() missing required keyword argument 'ticker'. {signature}\n")
        self.assertEqual(self.of_type(messages, "call"), [])

    def test_a_program_with_findings_does_not_run(self):
        messages = self.run_program("""
            print("never printed")
            r = await mcp__s__qurey(ticker="A")
            await mcp__s__query(ticker="A", limit="4")
            mcp__s__query(ticker="B")
        """, tools=[self.QUERY])
        error = messages[-1]["error"]
        self.assertEqual(error["kind"], "PrecheckError")
        self.assertEqual(error["message"],
                         "line 3: 'mcp__s__qurey' is not a tool; did you mean 'mcp__s__query'?\n"
                         "line 4: mcp__s__query(limit='4'): a string, but the tool expects an integer\n"
                         "line 5: mcp__s__query(...) is never awaited, so the call never happens; write await "
                         "mcp__s__query(...)\n"
                         "(checked before running: nothing ran, no tool was called)\n")
        self.assertEqual([m["type"] for m in messages], ["done"])

    def test_without_precheck_the_same_program_runs_until_its_first_error(self):
        messages = self.run_program("""
            print("printed")
            r = await mcp__s__qurey(ticker="A")
        """, tools=[self.QUERY], precheck=False)
        self.assertEqual(self.output(messages), "printed\n")
        self.assertTrue(self.error_of(messages)["message"].endswith(
            "NameError: name 'mcp__s__qurey' is not defined: 'mcp__s__qurey' is not a tool; did you mean "
            "'mcp__s__query'?\n"))

    def test_a_name_error_says_why_the_name_is_no_tool(self):
        cases = {
            "mcp__s__secret": "'mcp__s__secret' is not callable: it is blocked by tools.block",
            "mcp__gone__x": "'mcp__gone__x' is not callable now: its server 'gone' is unavailable: exited",
            "mcp__zz__zz": "'mcp__zz__zz' is not a tool; list_callable_tools() lists them",
        }
        for name, why in cases.items():
            messages = self.run_program(f"await {name}()", tools=[self.QUERY], precheck=False,
                                        not_callable={"mcp__s__secret": "it is blocked by tools.block"},
                                        down={"mcp__gone__": "server 'gone' is unavailable: exited"})
            self.assertTrue(self.error_of(messages)["message"].endswith(
                f"NameError: name '{name}' is not defined: {why}\n"), messages)

    def test_using_a_call_that_was_never_awaited_asks_about_await(self):
        for use, error in (("r['price']", "TypeError: 'coroutine' object is not subscriptable"),
                           ("r.get('price')", "AttributeError: 'coroutine' object has no attribute 'get'")):
            messages = self.run_program(f"""
                r = mcp__s__query(ticker="A")
                {use}
            """, tools=[self.QUERY], precheck=False)
            message = self.error_of(messages)["message"]
            self.assertTrue(message.endswith(
                f"{error} (did you forget `await`? a tool call gives a coroutine until awaited: "
                f"x = await mcp__s__t(...))\n"), message)
        messages = self.run_program("""
            async def mine():
                return 1
            c = mine()
            c["x"]
        """, precheck=False)
        self.assertTrue(self.error_of(messages)["message"].endswith(
            "TypeError: 'coroutine' object is not subscriptable\n"))

    # --- errors that show the data (explain.py) ---------------------------------------------------

    TIME_RESULT = {"source": {"timezone": "Europe/Paris", "datetime": "2026-12-03T12:00:00+01:00",
                              "day_of_week": "Thursday", "is_dst": False},
                   "target": {"timezone": "Asia/Tokyo", "datetime": "2026-12-03T20:00:00+09:00",
                              "day_of_week": "Thursday", "is_dst": False},
                   "time_difference": "+8.0h"}
    TIME_SHAPE = ("{'source': {'timezone': str, 'datetime': str, 'day_of_week': str, 'is_dst': bool}, "
                  "'target': {'timezone': str, 'datetime': str, 'day_of_week': str, 'is_dst': bool}, "
                  "'time_difference': str}")

    def notes_of(self, code, results, exception):
        """The lines the runner adds after the exception's line (which starts with `exception`), for a program
        whose tool calls get `results` in turn."""
        answers = iter(results)
        messages = self.run_program(code, tools=["mcp__s__t", "mcp__s__u"], precheck=False,
                                    answer=lambda r: ok(r, next(answers)))
        message = self.error_of(messages)["message"]
        lines = message.splitlines()
        ends = [i for i, line in enumerate(lines) if line.startswith(exception)]
        self.assertTrue(ends, message)
        return lines[ends[-1] + 1:]

    def test_a_key_error_on_a_tool_result_shows_its_keys_the_call_and_the_nearest_key(self):
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t(source_timezone="Europe/Paris", time="12:00", target_timezone="Asia/Tokyo")
            print(r['target_time'])
        """, [self.TIME_RESULT], "KeyError: 'target_time'"),
            [f"r came from mcp__s__t (line 2): a dict {self.TIME_SHAPE}", "did you mean r['target']?"])
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            print(r['datetime'])
        """, [self.TIME_RESULT], "KeyError"),
            [f"r came from mcp__s__t (line 2): a dict {self.TIME_SHAPE}",
             "did you mean r['source']['datetime'] or r['target']['datetime']?"])

    def test_a_key_found_only_in_text_the_tool_returned_points_at_that_text(self):
        self.assertEqual(self.notes_of("""
            info = await mcp__s__t(path="notes.txt")
            print(info["size"])
        """, [{"content": "size: 12\nmodified: today", "path": "notes.txt"}], "KeyError"),
            ["info came from mcp__s__t (line 2): a dict {'content': str, 'path': str}",
             "did you mean info['content'] (text that mentions 'size': 'size: 12\\nmodified: today')?"])

    def test_a_key_error_on_an_awaited_call_and_in_a_function_shows_the_result(self):
        self.assertEqual(self.notes_of("""
            print((await mcp__s__t())["count"])
        """, [{"total": 3, "items": []}], "KeyError"),
            ["the value came from mcp__s__t (line 2): a dict {'total': int, 'items': [] (empty)}"])
        self.assertEqual(self.notes_of("""
            def total(rows):
                return sum(row["price"] for row in rows)
            r = await mcp__s__t()
            print(total(r["items"]))
        """, [{"items": [{"name": "a", "cost": 3}]}], "KeyError"),
            ["row came from mcp__s__t (line 4), at ['items'][0] of its result: a dict {'name': str, 'cost': int}"])

    def test_a_string_result_used_as_a_dict_shows_its_first_characters(self):
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            print(r["name"])
        """, ["hello world, this is plain text and not JSON at all, long enough to be cut"], "TypeError"),
            ["r came from mcp__s__t (line 2): a str of 74 chars: "
             "'hello world, this is plain text and not JSON at all, long en'..."])

    def test_a_loop_over_a_json_string_says_so_and_what_it_parses_to(self):
        listing = '[\n  {"name": "a.txt", "type": "file"},\n  {"name": "sub", "type": "directory"}\n]'
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t(path="/data")
            for entry in r["content"]:
                print(entry["name"])
        """, [{"content": listing}], "TypeError"),
            [f"entry is one character of r[\"content\"], which came from mcp__s__t (line 2): "
             f"a str of {len(listing)} chars: {listing[:60]!r}... (JSON text: json.loads() gives a list of 2 "
             "items, the first {'name': str, 'type': str})",
             "did you mean a loop over json.loads(r[\"content\"])?"])

    def test_a_loop_over_a_dict_result_says_it_gives_keys(self):
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            for item in r:
                print(item["name"])
        """, [{"items": [{"name": "a"}], "total": 1}], "TypeError"),
            ["item is a key of r (a loop over a dict gives its keys), which came from mcp__s__t (line 2): "
             "a dict {'items': [{'name': str}] (1 item), 'total': int}",
             "did you mean a loop over r['items']?"])

    def test_a_list_result_indexed_by_a_key_or_past_its_end(self):
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            print(r["name"])
        """, [[{"name": "x", "id": 1}, {"name": "y", "id": 2}]], "TypeError"),
            ["r came from mcp__s__t (line 2): a list of 2 items, the first {'name': str, 'id': int}",
             "did you mean r[0] or a loop over r?"])
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            names = [d["name"] for d in r]
        """, [["/data/a", "/data/b"]], "TypeError")[0][:2], "d ")
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            print(r["items"][3])
        """, [{"items": []}], "IndexError"), ["r[\"items\"] came from mcp__s__t (line 2): an empty list"])
        self.assertEqual(self.notes_of("""
            items = (await mcp__s__t())["items"]
            print(items[3])
        """, [{"items": []}], "IndexError"), ["items came from mcp__s__t (line 2), at ['items'] of its result: "
                                              "an empty list"])

    def test_an_attribute_error_on_a_dict_result_suggests_the_key_that_has_it(self):
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t(path="notes.txt")
            for line in r.splitlines():
                print(line)
        """, [{"content": "hello\nworld\n"}], "AttributeError: 'dict' object has no attribute 'splitlines'"),
            ["r came from mcp__s__t (line 2): a dict {'content': str}", "did you mean r['content'].splitlines?"])
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            print(r.total)
        """, [{"total": 1}], "AttributeError"),
            ["r came from mcp__s__t (line 2): a dict {'total': int}", "did you mean r['total']?"])

    def test_a_missing_key_read_with_get_or_a_value_under_a_key_is_shown_with_its_result(self):
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            for item in r.get("itemz"):
                print(item)
        """, [{"items": [1, 2]}], "TypeError: 'NoneType' object is not iterable"),
            ["r.get(\"itemz\") is None: 'itemz' is not a key of r, which came from mcp__s__t (line 2): a dict "
             "{'items': [int, ...] (2 items)}", "did you mean r['items']?"])
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            print(r["total"] / 2)
        """, [{"total": "5"}], "TypeError"), ["r[\"total\"] came from mcp__s__t (line 2): a str of 1 char: '5'"])
        self.assertEqual(self.notes_of("""
            r = await mcp__s__t()
            print(r["owner"]["login"])
        """, [{"owner": None}], "TypeError"), ["r[\"owner\"] came from mcp__s__t (line 2): None"])

    def test_unpacking_a_result_says_what_each_item_is(self):
        self.assertEqual(self.notes_of("""
            sizes = await mcp__s__t()
            for name, size in sizes:
                print(name, size)
        """, [{"a.txt": 3, "b.txt": 5}], "ValueError: too many values to unpack"),
            ["name, size unpacks each key of sizes, which came from mcp__s__t (line 2): a dict {'a.txt': int, "
             "'b.txt': int}", "did you mean sizes.items()?"])
        self.assertEqual(self.notes_of("""
            first, second = await mcp__s__t()
        """, [[1, 2, 3]], "ValueError"), ["the value came from mcp__s__t (line 2): a list of 3 items, the first int"])
        self.assertEqual(self.notes_of("""
            await mcp__s__t()
            first, second = [1, 2, 3]
        """, [[1, 2, 3]], "ValueError"), [])

    def test_parsing_a_result_again_says_it_is_parsed_already(self):
        self.assertEqual(self.notes_of("""
            import json
            data = json.loads(await mcp__s__t())
        """, [{"a": 1}], "TypeError"),
            ["the value came from mcp__s__t (line 3): a dict {'a': int}",
             "tool results are parsed JSON already: use the value as it is"])

    def test_a_part_of_a_result_is_known_after_the_program_dropped_the_rest(self):
        self.assertEqual(self.notes_of("""
            rows = (await mcp__s__t())["data"]["rows"]
            await mcp__s__u()
            await mcp__s__u()
            print(rows[0]["nme"])
        """, [{"data": {"rows": [{"name": "x"}]}}, "other", "other"], "KeyError"),
            ["rows[0] came from mcp__s__t (line 2), at ['data']['rows'][0] of its result: a dict {'name': str}",
             "did you mean rows[0]['name']?"])

    def test_the_programs_own_values_are_never_taken_for_results(self):
        for code in ("""
            r = await mcp__s__t()
            mine = {"a": 1, "b": [1]}
            print(mine["c"])
        """, """
            r = await mcp__s__t()
            mine = dict(r)
            print(mine["c"])
        """, """
            import json
            r = await mcp__s__t()
            print(json.loads(json.dumps(r))["c"])
        """, """
            r = await mcp__s__t()
            text = "ab" + "cd"
            text["x"]
        """, """
            r = await mcp__s__t()
            r = None
            await mcp__s__u()
            mine = {"a": 1, "b": [1]}
            mine["c"]
        """):
            self.assertEqual(self.notes_of(code, [{"a": 1, "b": [1], "s": "abcd"}, "x"], "KeyError" if "c" in code
                                           and "text" not in code else "TypeError"), [], code)

    def test_explaining_an_error_runs_no_program_code(self):
        messages = self.run_program("""
            class Loud(dict):
                def __getitem__(self, key):
                    print("getitem", key)
                    raise KeyError(key)

                def __getattr__(self, name):
                    print("getattr", name)
                    raise AttributeError(name)
            r = await mcp__s__t()
            loud = Loud(r)
            loud["a"] + r["a"] + loud.get
        """, tools=["mcp__s__t"], answer=lambda r: ok(r, {"b": 1}), precheck=False)
        self.assertEqual(self.output(messages), "getitem a\n")
        self.assertTrue(self.error_of(messages)["message"].endswith("KeyError: 'a'\n"))

    def test_a_description_is_bounded_and_shows_no_value_but_a_strings_start(self):
        secret = "SECRET"
        result = {f"key{i}": {"value": secret, "nested": {"deeper": [secret] * 3}} for i in range(50)}
        result["text"] = "x" * 10_000 + secret
        notes = self.notes_of("""
            r = await mcp__s__t()
            r["missing"]
            """, [result], "KeyError")
        self.assertNotIn(secret, "\n".join(notes))
        self.assertLess(len(notes[0]), 800)
        self.assertIn("... 41 more keys", notes[0])
        notes = self.notes_of("""
            r = await mcp__s__t()
            r["text"]["x"]
            """, [result], "TypeError")
        self.assertEqual(notes, ["r[\"text\"] came from mcp__s__t (line 2): a str of 10006 chars: "
                                 f"'{'x' * 60}'..."])

    def test_host_files_and_modules_outside_the_sandbox_get_a_hint_only_when_uncaught(self):
        host = "(not visible here: programs see only their working directory; read host files through a tool)"
        for path in ("/nonexistent/data.csv", "../../nonexistent.txt"):
            self.assertEqual(self.notes_of(f"open({path!r})", [], "FileNotFoundError"), [host])
        self.assertEqual(self.notes_of("open('data.csv')", [], "FileNotFoundError"), [])
        self.assertEqual(self.notes_of("import pandas", [], "ModuleNotFoundError: No module named 'pandas'"),
                         ["(only the standard library is available here)"])
        self.assertEqual(self.notes_of("from requests.adapters import HTTPAdapter", [], "ModuleNotFoundError"),
                         ["(only the standard library is available here)"])
        messages = self.run_program("""
            try:
                import numpy
            except ModuleNotFoundError as e:
                print(type(e).__name__, e)
            try:
                open("/nonexistent/x")
            except FileNotFoundError as e:
                print(type(e).__name__, e)
        """)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), "ModuleNotFoundError No module named 'numpy'\n"
                                                "FileNotFoundError [Errno 2] No such file or directory: "
                                                "'/nonexistent/x'\n")

    def test_show_names_the_call_and_the_blocks_of_a_result_or_a_placeholder(self):
        image, audio = ("[non-text content omitted: image (image/png)]",
                        "[non-text content omitted: audio (audio/wav)]")

        def answer(request):
            if request["type"] == "show":
                left = "audio (audio/wav): max_attachments (1) already attached" if request["blocks"] == [1] else None
                return ok(request, {"attached": 1, "left_out": left})
            result = ok(request, {"result": "chart", "_notes": ["Found 2", image, audio]})
            result["media"] = [image, audio]
            return result

        messages = self.run_program("""
            r = await mcp__s__query(ticker="A")
            show(r)
            show(r["_notes"][2])
            show(r["_notes"][1][:])
            show(r["_notes"])
            for bad in ("Found 2", "text", 5):
                try:
                    show(bad)
                except ValueError as e:
                    print(str(e)[:39])
        """, tools=[self.QUERY], answer=answer)
        self.assert_success(messages)
        self.assertEqual([(m["call"], m["blocks"]) for m in self.of_type(messages, "show")],
                         [(1, [0, 1]), (1, [1]), (1, [0]), (1, [0, 1])])
        self.assertEqual(self.output(messages),
                         "[show(): left out audio (audio/wav): max_attachments (1) already attached]\n"
                         + "show() takes a tool result that carries\n" * 3)

    # --- attach ---------------------------------------------------------------------------------

    def test_attach_sends_a_files_path_type_and_bytes_and_only_the_size_past_the_limit(self):
        def answer(request):
            left = "file big.bin (application/octet-stream): 40 bytes" if "data" not in request else None
            return ok(request, {"attached": 0 if left else 1, "left_out": left})

        messages = self.run_program("""
            import os, pathlib
            pathlib.Path("data.csv").write_bytes(b"a,b\\r\\n1,\\xc3\\xa9\\n")
            os.makedirs("out/deep")
            pathlib.Path("out/deep/plot.png").write_bytes(bytes(range(20)))
            pathlib.Path("notes").write_text("x")
            pathlib.Path("pack.tar.gz").write_bytes(b"")
            pathlib.Path("big.bin").write_bytes(b"0" * 40)
            os.symlink("out/deep/plot.png", "alias")
            attach("data.csv")
            os.chdir("out")
            attach(pathlib.Path("deep/../deep/plot.png"))
            os.chdir("..")
            attach("notes", mime_type="application/vnd.example+json")
            attach("pack.tar.gz")
            print(attach("alias"))
            attach("big.bin")
        """, answer=answer, max_attachment_bytes=32)
        self.assert_success(messages)
        sent = [{k: v for k, v in m.items() if k not in ("type", "id")} for m in self.of_type(messages, "attach")]
        self.assertEqual(sent, [
            {"name": "data.csv", "mime_type": "text/csv", "size": 10, "data": "YSxiDQoxLMOpCg=="},
            {"name": "out/deep/plot.png", "mime_type": "image/png", "size": 20,
             "data": "AAECAwQFBgcICQoLDA0ODxAREhM="},
            {"name": "notes", "mime_type": "application/vnd.example+json", "size": 1, "data": "eA=="},
            {"name": "pack.tar.gz", "mime_type": "application/gzip", "size": 0, "data": ""},
            {"name": "out/deep/plot.png", "mime_type": "image/png", "size": 20,
             "data": "AAECAwQFBgcICQoLDA0ODxAREhM="},
            {"name": "big.bin", "mime_type": "application/octet-stream", "size": 40},
        ])
        self.assertEqual(self.output(messages),
                         "None\n[attach(): left out file big.bin (application/octet-stream): 40 bytes]\n")

    def test_attach_refuses_what_is_outside_the_working_directory_or_no_regular_file_at_once(self):
        outside = tempfile.NamedTemporaryFile()
        self.addCleanup(outside.close)
        messages = self.run_program(f"""
            import os, time
            os.symlink({outside.name!r}, "out")
            os.symlink("..", "up")
            os.mkdir("dir")
            os.mkfifo("fifo")
            start = time.monotonic()
            for path, mime in [("../x", None), ({outside.name!r}, None), ("out", None), ("up/x", None),
                               ("dir", None), (".", None), ("fifo", None), ("missing", None),
                               ("dir", "text"), ("dir", "a/b/c"), ("dir", "a/" + "b" * 65), ("dir", 5), (5, None)]:
                try:
                    attach(path, mime_type=mime)
                except (ValueError, TypeError, OSError) as e:
                    print(type(e).__name__, str(e).replace(os.getcwd(), "CWD").replace({outside.name!r}, "OUT"))
            print(time.monotonic() - start < 2)
        """)
        self.assert_success(messages)
        self.assertEqual(self.of_type(messages, "attach"), [])
        outside_rule = "is outside the working directory (CWD): only its files (symlinks followed) can be attached"
        mime_rule = ("attach(): mime_type must look like 'text/csv' (letters, digits and !#$&^_.+- on each side "
                     "of the '/', at most 64 each); got ")
        self.assertEqual(self.output(messages).splitlines(), [
            f"ValueError attach(): '../x' {outside_rule}",
            f"ValueError attach(): 'OUT' {outside_rule}",
            f"ValueError attach(): 'out' {outside_rule}",
            f"ValueError attach(): 'up/x' {outside_rule}",
            "ValueError attach(): 'dir' is a directory: only regular files can be attached",
            "ValueError attach(): '.' is a directory: only regular files can be attached",
            "ValueError attach(): 'fifo' is not a regular file (a FIFO, a socket or a device): only regular files "
            "can be attached",
            "FileNotFoundError [Errno 2] No such file or directory: 'CWD/missing'",
            f"ValueError {mime_rule}'text'",
            f"ValueError {mime_rule}'a/b/c'",
            f"ValueError {mime_rule}'a/" + "b" * 54 + "...",
            f"ValueError {mime_rule}5",
            "TypeError expected str, bytes or os.PathLike object, not int",
            "True",
        ])

    # --- errors ---------------------------------------------------------------------------------

    def test_traceback_shows_only_program_frames(self):
        messages = self.run_program("""
            import json

            def parse(text):
                return json.loads(text)

            parse("{nope")
        """)
        error = self.error_of(messages)
        self.assertEqual(error["kind"], "JSONDecodeError")
        self.assertEqual(error["message"],
                         'Traceback (most recent call last):\n'
                         '  File "<program>", line 7, in <module>\n'
                         '    parse("{nope")\n'
                         '  File "<program>", line 5, in parse\n'
                         '    return json.loads(text)\n'
                         'json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: '
                         'line 1 column 2 (char 1)\n')

    def test_chained_exceptions_are_filtered_too(self):
        messages = self.run_program("""
            try:
                {}["k"]
            except KeyError as e:
                raise RuntimeError("wrapped") from e
        """)
        message = self.error_of(messages)["message"]
        self.assertIn("KeyError: 'k'\n\nThe above exception was the direct cause", message)
        self.assertTrue(message.endswith('line 5, in <module>\n    raise RuntimeError("wrapped") from e\n'
                                         'RuntimeError: wrapped\n'), message)

    @unittest.skipUnless(sys.version_info >= (3, 11), "exception groups and TaskGroup are Python 3.11+")
    def test_exception_group_lists_sub_exceptions(self):
        messages = self.run_program("""
            import asyncio
            async with asyncio.TaskGroup() as group:
                group.create_task(mcp__s__t())
        """, tools=["mcp__s__t"], answer=lambda r: fail(r, "down"))
        error = self.error_of(messages)
        self.assertEqual(error["kind"], "ExceptionGroup")
        self.assertIn("ToolError: down", error["message"])

    def test_syntax_error(self):
        messages = self.run_program("x = 1\ny = (\n")
        error = self.error_of(messages)
        self.assertEqual(error["kind"], "SyntaxError")
        self.assertTrue(error["message"].startswith('  File "<program>", line 2\n'), error["message"])
        self.assertNotIn("Traceback", error["message"])
        never_closed = "'(' was never closed" if sys.version_info >= (3, 10) else "unexpected EOF while parsing"
        self.assertIn(f"SyntaxError: {never_closed}", error["message"])

    def test_sys_exit_zero_and_none_are_success(self):
        for code in ("import sys; sys.exit(0)", "import sys; sys.exit()", "raise SystemExit",
                     "import sys\nawait mcp__s__t()\nsys.exit(0)"):
            with self.subTest(code=code):
                self.assert_success(self.run_program(code, tools=["mcp__s__t"], answer=lambda r: ok(r, 1)))

    def test_sys_exit_nonzero_is_an_error(self):
        messages = self.run_program("""
            import sys
            print("bye")
            sys.exit(3)
        """)
        error = self.error_of(messages)
        self.assertEqual(error["kind"], "SystemExit")
        self.assertTrue(error["message"].endswith("    sys.exit(3)\nSystemExit: 3\n"), error["message"])
        self.assertEqual(self.output(messages), "bye\n")

    def test_a_huge_error_keeps_its_head_and_tail_within_the_output_limit(self):
        messages = self.run_program('raise ValueError("x" * 5_000_000 + "END")', max_output_bytes=1000)
        message = self.error_of(messages)["message"]
        self.assertLess(len(message), 1100)
        self.assertTrue(message.startswith("Traceback (most recent call last):\n"), message[:100])
        self.assertIn("characters left out ...]", message)
        self.assertTrue(message.endswith("xxxEND\n"), message[-100:])

    def test_keyboard_interrupt_is_reported(self):
        messages = self.run_program("raise KeyboardInterrupt")
        self.assertEqual(self.error_of(messages)["kind"], "KeyboardInterrupt")

    # --- hostile but harmless -------------------------------------------------------------------

    def test_leftover_task_printing_after_end_adds_nothing_after_done(self):
        messages = self.run_program("""
            import asyncio
            async def chatter():
                while True:
                    try:
                        print("tick", flush=True)
                        await asyncio.sleep(0.01)
                    except asyncio.CancelledError:
                        print("refusing to stop")
            task = asyncio.create_task(chatter())
            await asyncio.sleep(0.05)
        """)
        self.assert_success(messages)  # run_program asserts nothing follows done

    def test_threads_that_keep_printing(self):
        started = time.monotonic()
        messages = self.run_program("""
            import os, threading, time
            copy = os.dup(1)  # keeps the output pipe open past the end
            def spam():
                while True:
                    print("spam")
                    os.write(copy, b"copy\\n")
                    time.sleep(0.001)
            threading.Thread(target=spam).start()  # not a daemon
            time.sleep(0.05)
        """)
        self.assert_success(messages)
        self.assertLess(time.monotonic() - started, 5)

    def test_closed_replaced_stdout_and_deleted_builtins(self):
        for code in ("import sys; print('a'); sys.stdout.close()",
                     "import sys, io; print('a'); sys.stdout = io.StringIO(); print('lost')",
                     "import sys; print('a', end=''); sys.stdout = None",
                     "print('a'); del __builtins__",
                     "print('a'); globals().clear()",
                     "import os; print('a'); os.close(1); os.close(2)"):
            with self.subTest(code=code):
                messages = self.run_program(code)
                self.assert_success(messages)
                self.assertEqual(self.output(messages).strip(), "a")

    def test_raising_after_closing_stdout_still_reports(self):
        messages = self.run_program("import sys; sys.stdout.close(); print('x')")
        error = self.error_of(messages)
        self.assertEqual(error["kind"], "ValueError")

    def test_writing_to_the_channel_fd_directly(self):
        # The program can find the channel's out fd and write a line on it: we cannot prevent that from
        # inside the process. Observed: the forged line reaches the server verbatim, and the runner's own
        # `done` still follows as the last message. The server treats everything as untrusted anyway.
        messages = self.run_program("""
            import os
            hits = 0
            for fd in range(3, 21):
                try:
                    os.write(fd, b'{"type":"emit","value":"forged"}\\n')
                    hits += 1
                except OSError:
                    pass
            print("wrote to", hits, "fds")
        """)
        self.assert_success(messages)
        forged = [m for m in messages if m == {"type": "emit", "value": "forged"}]
        self.assertLessEqual(len(forged), 1)

    # --- sessions: one interpreter, run after run ------------------------------------------------
    def session_run(self, runner, code, tools=(), answer=None, cpu_seconds=30):
        """One run of a session's runner, to its `done`; the runner stays up for the next."""
        message = dict(run_message(textwrap.dedent(code), tools), session={"cpu_seconds": cpu_seconds})
        runner.send(message)
        messages = []
        while True:
            message = runner.recv(timeout=15)
            if message is None:
                self.fail(f"EOF before done; got {messages}, stderr {runner.stderr}")
            messages.append(message)
            if message["type"] == "done":
                return messages
            if message["type"] == "call" and answer is not None:
                runner.send(answer(message))

    def test_a_session_keeps_globals_imports_and_files_from_run_to_run(self):
        runner = self.start()
        first = self.session_run(runner, """
            import statistics
            rows = [3, 1, 2]
            def total(): return sum(rows)
            open("notes.txt", "w").write("kept")
            print("loaded")
        """)
        self.assert_success(first)
        second = self.session_run(runner, "rows.append(4); print(total(), statistics.median(rows), open('notes.txt').read())")
        self.assert_success(second)
        self.assertEqual(self.output(second), "10 2.5 kept\n")
        self.assertIsNone(runner.proc.poll(), "the session's runner waits for the next run")

    def test_a_failed_run_keeps_the_session_and_what_ran_before_the_error(self):
        runner = self.start()
        failed = self.session_run(runner, "x = 41\nraise ValueError('boom')")
        self.assertEqual(self.error_of(failed)["kind"], "ValueError")
        again = self.session_run(runner, "print(x + 1)")
        self.assert_success(again)
        self.assertEqual(self.output(again), "42\n")

    def test_a_session_rebinds_its_tools_each_run_and_drops_those_gone(self):
        runner = self.start()
        answer = lambda call: ok(call, call["tool"])
        first = self.session_run(runner, "print(await mcp__a__x())\nkeep = mcp__a__y", ["mcp__a__x", "mcp__a__y"], answer)
        self.assertEqual(self.output(first), "mcp__a__x\n")
        second = self.session_run(runner, """
            print('mcp__a__y' in globals(), await keep())
            print(await mcp__b__z())
        """, ["mcp__b__z"], answer, )
        self.assert_success(second)
        self.assertEqual(self.output(second), "False mcp__a__y\nmcp__b__z\n",
                         "an old tool kept under a name of the program's still works; unbound names are gone")

    def test_a_result_left_over_from_an_earlier_run_is_dropped_not_taken_for_the_next_run(self):
        runner = self.start()
        first = self.session_run(runner, """
            import asyncio
            try:
                await asyncio.wait_for(mcp__a__slow(), 0.1)
            except asyncio.TimeoutError:
                print("gave up")
        """, ["mcp__a__slow"])
        self.assertEqual(self.output(first), "gave up\n")
        call = self.of_type(first, "call")[0]
        runner.send(ok(call, "late"))
        self.assert_success(self.session_run(runner, "print('next')"))

    def test_each_session_run_gets_its_cpu_time_beyond_what_the_interpreter_used(self):
        runner = self.start()
        code = """
            import resource
            used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
            soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            print(0 < soft - used <= 7)
        """
        for _ in range(2):
            messages = self.session_run(runner, code, cpu_seconds=5)
            self.assertEqual(self.output(messages), "True\n", messages)

    def test_a_run_without_session_after_a_session_run_ends_the_runner(self):
        runner = self.start()
        self.assert_success(self.session_run(runner, "x = 1"))
        messages = self.run_program("print(x)", runner=runner)
        self.assertEqual(self.output(messages), "1\n")

    # --- channel EOF ----------------------------------------------------------------------------

    def assert_exits_promptly(self, runner):
        started = time.monotonic()
        runner.proc.stdin.close()
        self.assertEqual(runner.proc.wait(timeout=5), 0)
        self.assertLess(time.monotonic() - started, 2)

    def test_stdin_eof_before_run_exits(self):
        self.assert_exits_promptly(self.start())

    def test_stdin_eof_while_program_sleeps_exits(self):
        runner = self.start()
        runner.send(run_message("import time\nprint('go', flush=True)\ntime.sleep(60)", max_output_bytes=100))
        self.assertEqual(runner.recv(), {"type": "output", "data": "go\n"})
        self.assert_exits_promptly(runner)

    def test_stdin_eof_while_a_call_waits_in_the_loop_exits(self):
        runner = self.start()
        runner.send(run_message("await mcp__s__t()", ["mcp__s__t"], max_output_bytes=100))
        self.assertEqual(runner.recv()["type"], "call")
        self.assert_exits_promptly(runner)

    def test_stdin_eof_while_program_computes_exits(self):
        # Nothing waits for an answer, so nothing reads the channel: its hang-up alone ends the runner.
        runner = self.start()
        runner.send(run_message("print('go', flush=True)\nwhile True:\n    pass", max_output_bytes=100))
        self.assertEqual(runner.recv(), {"type": "output", "data": "go\n"})
        self.assert_exits_promptly(runner)

    def test_stdin_eof_while_waiting_for_a_helper_exits(self):
        runner = self.start()
        runner.send(run_message("server_status()", max_output_bytes=100))
        self.assertEqual(runner.recv()["type"], "helper")
        self.assert_exits_promptly(runner)

    def test_bad_run_message_is_reported(self):
        runner = self.start()
        runner.send({"type": "run", "code": 5})
        message = runner.recv()
        self.assertEqual(message["type"], "done")
        self.assertEqual(message["error"]["kind"], "ProtocolError")
        self.assertIsNone(runner.recv())

    # --- execution.site_packages and execution.preload (packages.py) ----------------------------------------

    def package_dir(self, modules):
        """A package directory holding these modules (name -> source)."""
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        for name, source in modules.items():
            with open(os.path.join(directory.name, name + ".py"), "w") as f:
                f.write(source)
        return directory.name

    def test_preloaded_modules_are_imported_before_ready_and_what_they_print_never_reaches_the_channel(self):
        site = self.package_dir({"ptcpkg": "print('imported at start-up' * 500)\nloads = 1\n"})
        runner = self.start({"site": [site], "preload": ["ptcpkg", "json"]})
        messages = self.run_program("""
            import sys
            print("preloaded" if "ptcpkg" in sys.modules else "not preloaded", sys.argv)
            import ptcpkg
            print(ptcpkg.loads, sys.path[-1] == SITE)
        """.replace("SITE", repr(site)), runner=runner)
        self.assert_success(messages)
        self.assertEqual(self.output(messages), f"preloaded ['-c']\n1 True\n")
        self.assertIn(b"imported at start-up", b"".join(runner.stderr))

    def test_a_preload_that_fails_fails_the_run_saying_which_and_why(self):
        runner = self.start({"site": [], "preload": ["json", "ptc_no_such_module"]})
        messages = self.run_program("print('never runs')", runner=runner)
        self.assertEqual(self.output(messages), "")
        self.assertEqual(messages[-1]["error"], {
            "kind": "PreloadError",
            "message": "execution.preload: module 'ptc_no_such_module' could not be imported here: "
                       "ModuleNotFoundError: No module named 'ptc_no_such_module'\n",
        })

    def test_with_packages_shown_a_missing_module_says_so(self):
        runner = self.start({"site": [self.package_dir({})], "preload": []})
        error = self.error_of(self.run_program("import ptc_no_such_module", runner=runner))
        self.assertIn("(only the standard library and the packages installed for the server's interpreter are "
                      "available here)", error["message"])

    def test_attach_takes_the_files_of_a_mount_that_is_a_symlink_out_and_no_other_symlink_out(self):
        folder, elsewhere = self.package_dir({"rows": "a,b\n"}), self.package_dir({"rows": "c,d\n"})
        def links(workdir):
            os.symlink(folder, os.path.join(workdir, "data"))
            os.symlink(elsewhere, os.path.join(workdir, "other"))
        runner = self.start({"site": [], "preload": [], "mounts": ["data"]}, setup=links)
        code = """
            attach('data/rows.py')
            try:
                attach('other/rows.py')
            except ValueError as e:
                print('refused:', str(e)[:40])
        """
        messages = self.run_program(code, runner=runner, answer=lambda m: ok(m, {"attached": 1, "left_out": None}))
        attached = [(m["name"], m["data"]) for m in self.of_type(messages, "attach")]
        self.assertEqual(attached, [("data/rows.py", "YSxiCg==")])
        self.assertEqual(self.output(messages), "refused: attach(): 'other/rows.py' is outside the\n")

    def test_without_options_sys_argv_and_the_hint_are_as_always(self):
        messages = self.run_program("import sys\nprint(sys.argv)\nimport ptc_no_such_module")
        self.assertEqual(self.output(messages), "['-c']\n")
        self.assertIn("(only the standard library is available here)", self.error_of(messages)["message"])



if __name__ == "__main__":
    unittest.main()
