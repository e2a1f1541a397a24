"""A FastMCP server guarded by FastMCP's in-memory OAuth provider, for ptc-mcp's OAuth tests.

Run with the venv from ci/test-deps.sh ($PTC_TEST_FASTMCP_PYTHON):

    oauth_server.py [--token-seconds N] [--no-registration] [--client ID[:SECRET] --client-redirect URI]

It listens on 127.0.0.1 on a port the OS chooses (or --port) and prints `PORT <n>` as its first line. The
authorization server is FastMCP's own (protected-resource metadata, RFC 8414 metadata, dynamic client
registration unless --no-registration, an /authorize that approves at once, rotating refresh tokens,
revocation). The MCP endpoint is /mcp (streamable HTTP), or /sse with --transport sse. --client registers a client ahead, with one redirect URI (as a provider's settings page does).

Beyond FastMCP, for what it lacks: --client-credentials ID:SECRET answers the client credentials grant at
/token for that client (FastMCP's token endpoint has no such grant); --required-scope S makes every call need
scope S, and its `403 insufficient_scope` challenge names the scope in `scope=` (as RFC 6750 §3 lets servers
do; FastMCP only names it in the description).

Test hooks (no auth, loopback only):
    GET  /test/stats                   counts (registrations, codes, refreshes, revocations, mcp calls)
                                       and every token value ever issued, for tests that grep outputs
    POST /test/forget-access-tokens    the next call with a live access token gets a 401; refresh works
    POST /test/revoke-all              every access and refresh token is gone (as a user revoking access)
"""

import argparse
import asyncio
import json
import re
import secrets
import socket
import time
import urllib.parse

import uvicorn
from fastmcp import FastMCP
from fastmcp.server.auth.providers import in_memory
from fastmcp.server.auth.providers.in_memory import InMemoryOAuthProvider
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull
from starlette.requests import Request
from starlette.responses import JSONResponse


class CountingProvider(InMemoryOAuthProvider):
    """The in-memory provider, counting what it does and remembering every token it issued."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.stats = {
            "registrations": 0,
            "codes": 0,
            "refreshes": 0,
            "revocations": 0,
            "client_credentials": 0,
            "tokens": [],
        }

    async def register_client(self, client_info):
        self.stats["registrations"] += 1
        await super().register_client(client_info)

    async def exchange_authorization_code(self, client, authorization_code):
        self.stats["codes"] += 1
        token = await super().exchange_authorization_code(client, authorization_code)
        self.stats["tokens"] += [token.access_token, token.refresh_token, authorization_code.code]
        return token

    async def exchange_refresh_token(self, client, refresh_token, scopes):
        self.stats["refreshes"] += 1
        token = await super().exchange_refresh_token(client, refresh_token, scopes)
        self.stats["tokens"] += [token.access_token, token.refresh_token]
        return token

    async def revoke_token(self, token):
        self.stats["revocations"] += 1
        await super().revoke_token(token)


class ClientCredentialsGrant:
    """ASGI middleware: the client credentials grant at /token for one configured client."""

    def __init__(self, app, provider, client, token_seconds):
        self.app, self.provider, self.token_seconds = app, provider, token_seconds
        self.client_id, _, self.secret = client.partition(":")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/token" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        form = dict(urllib.parse.parse_qsl(body.decode()))
        if form.get("grant_type") != "client_credentials":
            replayed = False

            async def replay():
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            return await self.app(scope, replay, send)
        if (form.get("client_id"), form.get("client_secret")) != (self.client_id, self.secret) or not form.get("resource"):
            return await respond(send, 401, {"error": "invalid_client"})
        token = f"test_access_token_cc_{secrets.token_hex(32)}"
        scopes = form.get("scope", "").split()
        self.provider.access_tokens[token] = AccessToken(
            token=token, client_id=self.client_id, scopes=scopes, expires_at=int(time.time() + self.token_seconds)
        )
        self.provider.stats["client_credentials"] += 1
        self.provider.stats["tokens"].append(token)
        reply = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_seconds, "scope": " ".join(scopes)}
        await respond(send, 200, reply)


class ScopeInChallenge:
    """ASGI middleware: adds `scope="S"` to a 403 insufficient_scope challenge that names S in its description."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def send_with_scope(message):
            if message["type"] == "http.response.start" and message["status"] == 403:
                headers = []
                for name, value in message["headers"]:
                    required = re.search(rb'Required scope: ([^"]+)"', value)
                    if name == b"www-authenticate" and required:
                        value += b', scope="' + required.group(1) + b'"'
                    headers.append((name, value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_scope)


async def respond(send, status, body):
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-seconds", type=int, default=3600)
    parser.add_argument("--no-registration", action="store_true")
    parser.add_argument("--client", help="a pre-registered client: ID or ID:SECRET")
    parser.add_argument("--client-redirect", help="the pre-registered client's one redirect URI")
    parser.add_argument("--client-credentials", help="ID:SECRET of a client that may use the client credentials grant")
    parser.add_argument("--required-scope", help="a scope every call needs")
    parser.add_argument("--transport", choices=["http", "sse"], default="http", help="sse: the legacy transport at /sse")
    args = parser.parse_args()
    in_memory.DEFAULT_ACCESS_TOKEN_EXPIRY_SECONDS = args.token_seconds

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    provider = CountingProvider(
        base_url=base,
        client_registration_options=ClientRegistrationOptions(enabled=not args.no_registration),
        revocation_options=RevocationOptions(enabled=True),
        required_scopes=[args.required_scope] if args.required_scope else None,
    )
    if args.client:
        client_id, _, secret = args.client.partition(":")
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret or None,
            token_endpoint_auth_method="client_secret_post" if secret else "none",
            redirect_uris=[args.client_redirect],
            grant_types=["authorization_code", "refresh_token"],
        )

    mcp = FastMCP("oauth-test")
    mcp.auth = provider

    @mcp.tool
    def whoami(greeting: str = "hello") -> str:
        """Say hello to the caller (the token is checked by the server's auth)."""
        return f"{greeting}, authorized caller"

    @mcp.custom_route("/test/stats", methods=["GET"])
    async def stats(_: Request):
        return JSONResponse(provider.stats)

    @mcp.custom_route("/test/forget-access-tokens", methods=["POST"])
    async def forget(_: Request):
        provider.access_tokens.clear()
        return JSONResponse({"ok": True})

    @mcp.custom_route("/test/revoke-all", methods=["POST"])
    async def revoke_all(_: Request):
        provider.access_tokens.clear()
        provider.refresh_tokens.clear()
        return JSONResponse({"ok": True})

    if args.transport == "sse":
        app = ScopeInChallenge(mcp.http_app(path="/sse", transport="sse"))
    else:
        app = ScopeInChallenge(mcp.http_app(path="/mcp"))
    if args.client_credentials:
        app = ClientCredentialsGrant(app, provider, args.client_credentials, args.token_seconds)
    sock.listen(128)  # connections queue from now on, before uvicorn starts accepting
    print(f"PORT {port}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
