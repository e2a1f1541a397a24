"""ptc-mcp runner pod: the runner container's first process, while the server execs its runner into the
container. It ends (and with it the pod) once the runner is gone: a pod whose server died ends too, since its
runner reads the end of its input and exits, and the next server removes it. argv[1]: seconds to wait for the
first runner (0: no limit, for a warm pool's pods waiting to be claimed)."""
import os
import sys
import time

try:
    import ctypes
    # PR_SET_DUMPABLE 0: a runner (the same user) cannot open this process's memory through /proc.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass


def others():
    me = os.getpid()
    return any(name.isdigit() and int(name) != me for name in os.listdir("/proc"))


first_wait = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
started = time.monotonic()
while not others():
    if first_wait and time.monotonic() - started > first_wait:
        sys.exit(0)
    time.sleep(0.2)
while others():
    time.sleep(0.5)
