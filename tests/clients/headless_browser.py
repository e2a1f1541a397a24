"""A browser for OAuth tests that approves at once: ptc-mcp starts it as `$BROWSER URL`; it GETs the
authorization URL and follows the redirects (the test authorization server approves without asking) back to
ptc-mcp's loopback callback. With HEADLESS_BROWSER_LOG set, it appends the URL it was given and the final
status to that file. Stdlib only: it runs under any python3.
"""

import os
import sys
import urllib.error
import urllib.request


def main():
    url = sys.argv[-1]
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except Exception as error:  # noqa: BLE001 - a test reads the log to see what went wrong
        status = f"error {error}"
    log = os.environ.get("HEADLESS_BROWSER_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{url}\n{status}\n")


if __name__ == "__main__":
    main()
