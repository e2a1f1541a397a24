"""ptc-mcp runner, part 0: the runner's options, installed packages and preloaded modules (execution.mounts,
execution.site_packages, execution.preload).

Runs first, before the runner takes over its fds (and alone in the sandbox probes). The server passes the
options as one JSON argument after the source (`python -I -S -c SOURCE '{"site":[...],"preload":[...]}'`, and
`"mounts":[names]` with mounts); without options there is no argument and nothing happens. A preload that
fails is reported, never skipped.
"""
import sys


def runner_options():
    """The options the server passed ({} without), taken off sys.argv (which becomes ['-c'] again)."""
    if len(sys.argv) < 2:
        return {}
    import json
    options = json.loads(sys.argv[1])
    del sys.argv[1:]
    return options


def prepare_packages(options):
    """Adds the `site` directories (with their .pth files) to sys.path and imports the `preload` modules, with
    anything they print sent to stderr (the channel is fd 1). Returns whether package directories were added,
    and None or why a preload failed."""
    shown = bool(options.get("site"))
    if shown:
        import site
        for directory in options["site"]:
            site.addsitedir(directory)
    import os
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        for name in options.get("preload", ()):
            try:
                __import__(name)
            except BaseException as e:
                return shown, f"execution.preload: module '{name}' could not be imported here: {type(e).__name__}: {e}"
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return shown, None
