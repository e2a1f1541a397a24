import os
def _ptc_boot():
    def read(n):
        data = b""
        while len(data) < n:
            chunk = os.read(0, n - len(data))
            if not chunk:
                raise SystemExit(70)
            data += chunk
        return data
    header = b""
    while not header.endswith(b"\n"):
        header += read(1)
    return compile(read(int(header)), "<string>", "exec")
os.write(1, b"\n")
exec(_ptc_boot())
