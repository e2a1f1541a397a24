"""ptc-mcp runner, part 0: installed packages and preloaded modules (execution.site_packages, execution.preload).

Runs first, before the runner takes over its fds (and alone in the sandbox probes). The server passes the
options as one JSON argument after the source (`python -I -S -c SOURCE '{"site":[...],"preload":[...]}'`);
without options there is no argument and nothing happens. A preload that fails is reported, never skipped.
"""
import sys


def prepare_packages():
    """Adds the `site` directories (with their .pth files) to sys.path and imports the `preload` modules, with
    anything they print sent to stderr (the channel is fd 1); sys.argv becomes ['-c'] again. Returns whether
    package directories were added, and None or why a preload failed."""
    if len(sys.argv) < 2:
        return False, None
    import json
    import os
    options = json.loads(sys.argv[1])
    del sys.argv[1:]
    shown = bool(options["site"])
    if shown:
        import site
        for directory in options["site"]:
            site.addsitedir(directory)
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        for name in options["preload"]:
            try:
                __import__(name)
            except BaseException as e:
                return shown, f"execution.preload: module '{name}' could not be imported here: {type(e).__name__}: {e}"
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return shown, None
