"""The runner as the server starts it, and the `run` message as the server sends it (PROTOCOL.md)."""
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
# backends/src/protocol.rs joins the two files the same way.
RUNNER_SOURCE = "\n".join((SRC / name).read_text("utf-8") for name in ("packages.py", "checks.py", "explain.py", "runner.py"))
ZYGOTE_SOURCE = "AS_ZYGOTE = True\n" + RUNNER_SOURCE + "\n" + (SRC / "zygote.py").read_text("utf-8")


def open_tool(name):
    """A tool whose schema names no parameters: it takes any keyword arguments."""
    return {"name": name, "params": [], "extra": {"name": "extra", "annotation": "Any"}, "returns": "Any",
            "doc": f"async def {name}(\n    **extra: Any,  # more keys are allowed\n) -> Any:\n    ...\n"}


def run_message(code, tools=(), max_output_bytes=65536, not_callable=None, down=None, precheck=True,
                progress=False, max_attachment_bytes=10485760):
    """`tools` holds names (tools that take anything) or tool objects as the server describes them."""
    return {"type": "run", "code": code,
            "tools": [open_tool(t) if type(t) is str else t for t in tools],
            "not_callable": not_callable or {}, "down": down or {}, "precheck": precheck,
            "progress": progress, "max_output_bytes": max_output_bytes, "max_attachment_bytes": max_attachment_bytes}
