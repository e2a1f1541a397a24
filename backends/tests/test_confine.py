"""Tests for backends/src/docker/confine.py, the docker backend's confinement prologue.

The syscall tables are checked against the kernel headers where they are installed, and the filter is
installed for real in a child interpreter on Linux (x86_64/aarch64), started as the docker backend starts it.

Run with: python3 -m unittest discover -s backends/tests -v
"""
import json
import os
import pathlib
import platform
import resource
import re
import subprocess
import sys
import tempfile
import unittest

from runner_source import RUNNER_SOURCE, run_message

SOURCE = (pathlib.Path(__file__).resolve().parent.parent / "src" / "docker" / "confine.py").read_text("utf-8")
namespace = {}
exec(compile(SOURCE, "confine.py", "exec"), namespace)
ARCHES, ALWAYS, unless_arg_in, seccomp_program = (
    namespace["ARCHES"], namespace["ALWAYS"], namespace["unless_arg_in"], namespace["seccomp_program"])

HEADERS = {
    "x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
    "aarch64": "/usr/include/asm-generic/unistd.h",
}
LIMITS = {"CPU": 30, "AS": 1 << 30, "FSIZE": 64 << 20, "NOFILE": 64, "CORE": 0}


def header_numbers(path):
    text = pathlib.Path(path).read_text()
    return {name: int(number) for name, number in re.findall(r"#define __NR_(\w+)\s+(\d+)\b", text)}


class Tables(unittest.TestCase):
    def test_every_syscall_is_numbered_for_every_architecture(self):
        names = set(ALWAYS) | set(unless_arg_in(1)) | {"clone", "clone3", "seccomp"}
        for machine in ("x86_64", "aarch64"):
            missing = {n for n in names if n not in ARCHES[machine]}
            self.assertEqual(missing, set(), machine)

    def test_numbers_match_the_kernel_headers(self):
        checked = 0
        for machine, header in HEADERS.items():
            if not os.path.exists(header):
                continue
            numbers = header_numbers(header)
            newest = max(numbers.values())
            for name, number in ARCHES[machine].items():
                if name in ("audit", "x32_bit") or number is None:
                    continue
                if name not in numbers:  # newer than these headers
                    self.assertGreater(number, newest, f"{machine} {name} is missing from {header}")
                    continue
                self.assertEqual(numbers.get(name), number, f"{machine} {name}")
                checked += 1
        if not checked:
            self.skipTest("no kernel headers (linux-libc-dev) here")

    def test_the_program_fits_and_every_jump_lands_inside_it(self):
        for machine in ("x86_64", "aarch64"):
            program = seccomp_program(machine, 1)
            self.assertLess(len(program), 4096)
            for index, (code, jt, jf, _) in enumerate(program):
                if code & 0x07 == 0x05:  # BPF_JMP
                    self.assertLess(index + 1 + max(jt, jf), len(program))
                self.assertLessEqual(max(jt, jf), 255)
            self.assertEqual(program[-1], (0x06, 0, 0, 0x7FFF0000), "the default is to allow")


SUPPORTED = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")

# Runs after the prologue in the child: tries what the filter must stop and what must keep working.
CHECKS = r"""
import errno, json, os, resource, socket, threading
report = {}
def attempt(name, action):
    try:
        action()
        report[name] = 'allowed'
    except OSError as e:
        report[name] = errno.errorcode.get(e.errno, str(e.errno))
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
attempt('fork', fork)
attempt('exec', lambda: os.execv('/bin/true', ['true']))
attempt('socket', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
attempt('unix socket', lambda: socket.socket(socket.AF_UNIX).close())
attempt('socketpair', lambda: [s.close() for s in socket.socketpair()])
attempt('kill parent', lambda: os.kill(os.getppid(), 0))
attempt('kill self', lambda: os.kill(os.getpid(), 0))
attempt('prlimit parent', lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE))
attempt('renice my user', lambda: os.setpriority(os.PRIO_USER, 0, os.getpriority(os.PRIO_USER, 0)))
attempt('renice myself', lambda: os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0)))
attempt('memfd', lambda: os.close(os.memfd_create('x')))
def send_to(address):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        a.sendto(b'x', address)
    finally:
        a.close(); b.close()
attempt('sendto an address', lambda: send_to('\0ptc-confine-test'))
def send_to_peer():
    a, b = socket.socketpair()
    try:
        a.send(b'x')
        assert b.recv(1) == b'x'
    finally:
        a.close(); b.close()
attempt('send to the peer', send_to_peer)
results = []
thread = threading.Thread(target=lambda: results.append(sum(range(10))))
thread.start(); thread.join()
report['thread'] = 'allowed' if results == [45] else 'broken'
report['env'] = sorted(set(os.environ) - {'LC_CTYPE'})
report['nofile'] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
report['as'] = resource.getrlimit(resource.RLIMIT_AS)[0]
print(json.dumps(report))
"""


@unittest.skipUnless(SUPPORTED, "the filter is installed only on Linux x86_64/aarch64")
class Installed(unittest.TestCase):
    def run_confined(self, body, preexec_fn=None):
        source = f"{SOURCE}\nconfine({json.dumps(LIMITS)})\ndel confine\n{body}"
        with tempfile.TemporaryDirectory() as home:
            env = {"HOME": home, "TMPDIR": home, "PATH": "/usr/bin:/bin", "HOSTNAME": "x", "USER": "ptc"}
            return subprocess.run([sys.executable, "-I", "-S", "-c", source], env=env, cwd=home,
                                  capture_output=True, text=True, timeout=60, preexec_fn=preexec_fn)

    def test_a_limit_the_runtime_already_holds_lower_is_kept_not_raised(self):
        # gVisor's RLIMIT_SIGPENDING is 0, and it refuses to set it; lower than ours is tighter anyway.
        def lower_nofile():
            resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
        done = self.run_confined("import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))", lower_nofile)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), "(32, 32)")

    def test_what_the_filter_stops_and_what_keeps_working(self):
        done = self.run_confined(CHECKS)
        self.assertEqual(done.returncode, 0, done.stderr)
        report = json.loads(done.stdout)
        for name in ("fork", "exec", "socket", "unix socket", "kill parent", "prlimit parent", "renice my user",
                     "memfd", "sendto an address"):
            self.assertEqual(report[name], "EPERM", name)
        for name in ("socketpair", "kill self", "thread", "renice myself", "send to the peer"):
            self.assertEqual(report[name], "allowed", name)
        self.assertEqual(report["env"], ["HOME", "TMPDIR", "USER"])
        self.assertEqual((report["nofile"], report["as"]), (64, 1 << 30))

    def test_the_runner_still_starts_and_answers(self):
        source = f"{SOURCE}\nconfine({json.dumps(LIMITS)})\ndel confine\n{RUNNER_SOURCE}"
        with tempfile.TemporaryDirectory() as home:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", source], env={"HOME": home}, cwd=home,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            proc.stdin.write(json.dumps(run_message("print(6 * 7)", max_output_bytes=1000)).encode() + b"\n")
            proc.stdin.flush()  # kept open until the end: EOF on the channel ends the runner at once
            messages = []
            for line in proc.stdout:
                messages.append(json.loads(line))
                if messages[-1]["type"] == "done":
                    break
            proc.stdin.close()
            err = proc.stderr.read()
            proc.wait(timeout=60)
        self.assertEqual(messages[0], {"type": "ready", "version": 4}, err)
        self.assertIn({"type": "output", "data": "42\n"}, messages)
        self.assertEqual(messages[-1], {"type": "done", "error": None})

    def test_an_unknown_architecture_fails_closed(self):
        done = self.run_confined("print('ran unconfined')")
        self.assertEqual(done.returncode, 0, done.stderr)
        source = SOURCE.replace('ARCHES["arm64"] = ARCHES["aarch64"]', 'ARCHES.clear()')
        with tempfile.TemporaryDirectory() as home:
            failed = subprocess.run([sys.executable, "-I", "-S", "-c",
                                     f"{source}\nconfine({json.dumps(LIMITS)})\nprint('ran unconfined')"],
                                    env={}, cwd=home, capture_output=True, text=True, timeout=60)
        self.assertEqual(failed.returncode, 70)
        self.assertEqual(failed.stdout, "")
        self.assertIn("ptc-docker: cannot confine the interpreter", failed.stderr)


if __name__ == "__main__":
    unittest.main()
