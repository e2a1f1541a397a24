"""Tests for backends/src/zygote.py under its `none` confinement: this file plays the server on the zygote's
socket (PROTOCOL.md, "The zygote") — forks, their runs, how they ended, reaping.

Run with: python3 -m unittest discover -s backends/tests -v
"""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from runner_source import ZYGOTE_SOURCE, run_message


@unittest.skipUnless(sys.platform.startswith("linux"), "the zygote runs on Linux (pidfds)")
class Zygote(unittest.TestCase):
    def setUp(self):
        self.server, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.zygote = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", ZYGOTE_SOURCE, "{}", json.dumps({"backend": "none"})],
            stdin=theirs, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={"MALLOC_ARENA_MAX": "2"})
        theirs.close()
        self.server.settimeout(20)
        self.scratch = tempfile.TemporaryDirectory()
        self.ids = iter(range(1, 1000))

    def tearDown(self):
        self.server.close()
        self.assertEqual(self.zygote.wait(timeout=20), 0, "the zygote ends when its socket closes")
        self.zygote.stderr.close()
        self.scratch.cleanup()

    def receive(self):
        message, fds, _, _ = socket.recv_fds(self.server, 1 << 16, 4)
        self.assertTrue(message, "the zygote is alive")
        return json.loads(message), fds

    def fork(self, rlimits=()):
        """A fork, its stdin and stdout, its id and its pidfd."""
        run = next(self.ids)
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        request = {"fork": run, "rlimits": [list(r) for r in rlimits], "env": {"USER": "someone"},
                   "scratch": self.scratch.name.encode().hex(), "scratch_mb": 1}
        socket.send_fds(self.server, [json.dumps(request).encode()], [stdin_read, stdout_write, stderr_write])
        for fd in (stdin_read, stdout_write, stderr_write, stderr_read):
            os.close(fd)
        answer, fds = self.receive()
        self.assertEqual(answer, {"forked": run})
        self.assertEqual(len(fds), 1, "a pidfd of the fork")
        return os.fdopen(stdin_write, "wb", buffering=0), os.fdopen(stdout_read, "rb"), run, fds[0]

    def run_program(self, code, rlimits=()):
        """Runs `code` in a new fork; its `done` message, the fork's exit report and its pidfd."""
        to_fork, from_fork, run, pidfd = self.fork(rlimits)
        self.assertEqual(json.loads(from_fork.readline()), {"type": "ready", "version": 4})
        to_fork.write(json.dumps(run_message(code)).encode() + b"\n")
        messages = [json.loads(line) for line in from_fork]
        to_fork.close()
        from_fork.close()
        exited, _ = self.receive()
        self.assertEqual(exited["exited"], run)
        return messages, exited, pidfd, run

    def test_a_fork_runs_one_program_in_its_scratch_with_its_environment_and_limits(self):
        code = ("import os, resource\nprint(os.getcwd(), sorted(os.environ), os.environ['HOME'] == os.getcwd(),\n"
                "      resource.getrlimit(resource.RLIMIT_NOFILE), os.getpgid(0) == os.getpid())")
        messages, exited, pidfd, run = self.run_program(code, [(resource.RLIMIT_NOFILE, 64)])
        output = "".join(m["data"] for m in messages if m["type"] == "output")
        self.assertEqual(output, f"{os.path.realpath(self.scratch.name)} ['HOME', 'TMPDIR', 'USER'] True (64, 64) True\n")
        self.assertEqual(messages[-1], {"type": "done", "error": None})
        self.assertEqual(exited, {"exited": run, "code": 0})
        os.close(pidfd)

    def test_an_ended_fork_stays_unreaped_until_the_server_says_reap(self):
        _, exited, pidfd, run = self.run_program("print(1)")
        pid = int(next(l for l in open(f"/proc/self/fdinfo/{pidfd}") if l.startswith("Pid:")).split()[1])
        self.assertEqual(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0], "Z", "a zombie until reaped")
        self.server.send(json.dumps({"reap": run}).encode())
        for _ in range(500):
            if not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(0.01)
        self.assertFalse(os.path.exists(f"/proc/{pid}"), "reaped once the server said so")
        os.close(pidfd)

    def test_a_killed_fork_is_reported_with_its_signal_and_forks_share_nothing(self):
        first, _, pidfd, _ = self.run_program("import sys\nsys.modules['json'].dumps = None\nprint('tampered')")
        os.close(pidfd)
        to_fork, from_fork, run, pidfd = self.fork()
        self.assertEqual(json.loads(from_fork.readline())["type"], "ready")
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        exited, _ = self.receive()
        self.assertEqual(exited, {"exited": run, "signal": signal.SIGKILL})
        to_fork.close()
        from_fork.close()
        os.close(pidfd)
        messages, _, pidfd, _ = self.run_program("import json\nprint(json.dumps([1]))")
        self.assertIn({"type": "output", "data": "[1]\n"}, messages)
        os.close(pidfd)


if __name__ == "__main__":
    unittest.main()
