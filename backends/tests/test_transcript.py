"""The runner against the golden transcript (backends/tests/golden_transcript.txt, PROTOCOL.md): given the
server's lines (`> `), it writes exactly the runner's lines (`< `), byte for byte. The Rust side checks the
same file (src/engine/transcript.rs).

Run with: python3 -m unittest discover -s backends/tests -v
"""
import pathlib
import subprocess
import sys
import tempfile
import unittest

from runner_source import RUNNER_SOURCE

TRANSCRIPT = pathlib.Path(__file__).resolve().parent / "golden_transcript.txt"


class TranscriptTest(unittest.TestCase):
    def test_the_runner_writes_exactly_the_transcripts_lines(self):
        lines = TRANSCRIPT.read_text("utf-8").splitlines()
        with tempfile.TemporaryDirectory() as scratch:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", RUNNER_SOURCE], env={}, cwd=scratch,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                for number, line in enumerate(lines, 1):
                    direction, text = line[:2], line[2:]
                    if direction == "> ":
                        proc.stdin.write(text.encode("utf-8") + b"\n")
                        proc.stdin.flush()
                    else:
                        self.assertEqual(direction, "< ", f"line {number}")
                        self.assertEqual(proc.stdout.readline().decode("utf-8"), text + "\n", f"line {number}")
                proc.stdin.close()
                self.assertEqual(proc.stdout.read(), b"", "nothing may follow done")
                self.assertEqual(proc.wait(timeout=10), 0)
            finally:
                proc.kill()
                proc.wait()
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    stream.close()


if __name__ == "__main__":
    unittest.main()
