"""What keeps other sites out of the console: the Host it answers to, a token per
browser session on every action, and headers that forbid framing and foreign code.

The server listens on loopback only, but any page a browser opens can send
requests there. So:

* a request whose ``Host`` is not this server's loopback address is refused
  (a DNS-rebinding page names its own host);
* an action (a POST) needs the session's token, which only pages of this
  server carry in their forms: the token is an HMAC of the session cookie
  (``SameSite=Lax``, ``HttpOnly``) under a secret made when the server
  starts, and a POST whose ``Origin`` is another site is refused too;
* every response forbids framing, inline scripts and other origins (CSP).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SECURITY_HEADERS", "Guard", "Sessions"]

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # "no-referrer" makes a form's Origin "null"
    "cache-control": "no-store",
}


class Sessions:
    """Session cookies and the token that goes with each."""

    def __init__(self, *, port: int) -> None:
        self._secret = secrets.token_bytes(32)
        self.cookie = f"orchestra_console_{port}"  # browsers share cookies across ports

    def session(self, request: Request) -> tuple[str, bool]:
        """The request's session id, and whether it is new (a cookie to set)."""
        found = request.cookies.get(self.cookie, "")
        if 16 <= len(found) <= 64 and found.isascii():
            return found, False
        return secrets.token_urlsafe(24), True

    def token(self, session: str) -> str:
        """The token that the session's forms carry."""
        return hmac.new(self._secret, session.encode(), hashlib.sha256).hexdigest()

    def valid(self, request: Request, token: str) -> bool:
        """Whether ``token`` (from a form) belongs to the request's session cookie."""
        session = request.cookies.get(self.cookie)
        return session is not None and hmac.compare_digest(self.token(session), token)

    def set_cookie(self, response: Response, session: str) -> None:
        response.set_cookie(self.cookie, session, httponly=True, samesite="lax", path="/")


class Guard:
    """ASGI middleware: refuses foreign hosts and origins, adds :data:`SECURITY_HEADERS`."""

    def __init__(self, app: ASGIApp, *, port: int) -> None:
        self._app = app
        self._hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        refused = self._refusal(Headers(scope=scope), scope["method"])
        if refused is not None:
            await PlainTextResponse(refused, status_code=403)(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _with_security_headers(message["headers"])
            await send(message)

        await self._app(scope, receive, secured)

    def _refusal(self, headers: Headers, method: str) -> str | None:
        """Why the request is refused, or None."""
        if headers.get("host") not in self._hosts:
            return "refused: this console answers only to its own loopback address"
        origin = headers.get("origin")
        if (
            method != "GET"
            and origin is not None
            and origin.removeprefix("http://") not in self._hosts
        ):
            return "refused: a request from another site"
        return None


def _with_security_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response's headers, and each of :data:`SECURITY_HEADERS` it did not set."""
    present = Headers(raw=raw)
    extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k not in present]
    return [*raw, *extra]
