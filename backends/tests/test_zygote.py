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

    def fork(self, rlimits=(), cgroup=()):
        """A fork, its stdin and stdout, its id and its pidfd; `cgroup`: the handles on its cgroup."""
        run = next(self.ids)
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        request = {"fork": run, "rlimits": [list(r) for r in rlimits], "env": {"USER": "someone"},
                   "scratch": self.scratch.name.encode().hex(), "scratch_mb": 1}
        fds = [stdin_read, stdout_write, stderr_write, *cgroup]
        socket.send_fds(self.server, [json.dumps(request).encode()], fds)
        for fd in (stdin_read, stdout_write, stderr_write, stderr_read, *cgroup):
            os.close(fd)
        answer, fds = self.receive()
        self.assertEqual(answer, {"forked": run})
        self.assertEqual(len(fds), 1, "a pidfd of the fork")
        return os.fdopen(stdin_write, "wb", buffering=0), os.fdopen(stdout_read, "rb"), run, fds[0]

    def run_program(self, code, rlimits=(), cgroup=()):
        """Runs `code` in a new fork; its messages, the fork's exit report, its pidfd and its id."""
        to_fork, from_fork, run, pidfd = self.fork(rlimits, cgroup)
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

    @unittest.skipUnless(os.access("/sys/fs/cgroup/unified/cgroup.procs", os.W_OK)
                         or os.access("/sys/fs/cgroup/cgroup.procs", os.W_OK), "needs a writable cgroup v2 hierarchy")
    def test_a_fork_starts_in_its_cgroup(self):
        root = "/sys/fs/cgroup/unified" if os.path.exists("/sys/fs/cgroup/unified/cgroup.procs") else "/sys/fs/cgroup"
        with open("/proc/self/cgroup") as own:
            here = own.read().split("0::", 1)[1].split("\n")[0]
        group = f"{root}{here.rstrip('/')}/ptc-zygote-test-{os.getpid()}"
        os.mkdir(group)
        try:
            handles = [os.open(group, os.O_PATH | os.O_DIRECTORY), os.open(f"{group}/cgroup.procs", os.O_WRONLY)]
            code = "print(open('/proc/self/cgroup').read().split('0::', 1)[1].split()[0])"
            messages, exited, pidfd, run = self.run_program(code, cgroup=handles)
            output = "".join(m["data"] for m in messages if m["type"] == "output")
            self.assertEqual(output.strip(), group[len(root):])
            self.server.send(json.dumps({"reap": run}).encode())
            os.close(pidfd)
        finally:
            for _ in range(500):
                try:
                    os.rmdir(group)
                    break
                except OSError:
                    time.sleep(0.01)

    def test_an_ended_fork_stays_unreaped_until_the_server_says_reap(self):
        _, exited, pidfd, run = self.run_program("print(1)")
        with open(f"/proc/self/fdinfo/{pidfd}") as info:
            pid = int(next(line for line in info if line.startswith("Pid:")).split()[1])
        with open(f"/proc/{pid}/stat") as stat:
            self.assertEqual(stat.read().rsplit(")", 1)[1].split()[0], "Z", "a zombie until reaped")
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
