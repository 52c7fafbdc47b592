"""Who may talk to ``rlf ui``: the holder of the secret it printed at start, from its own pages.

As in Jupyter, each start makes a secret token; the URL printed on the terminal carries it once, and
the UI answers with a cookie (``HttpOnly``, ``SameSite=Strict``) and a redirect to the same page without
it. Every route needs the cookie or the token in a header (``X-RLF-Token`` or ``Authorization: Bearer``,
for scripts). A request that changes something (any method but GET and HEAD) and relies on the cookie
must also come from the UI's own origin (``Origin``) and carry the page's CSRF token (``X-RLF-CSRF``, which
htmx sends from ``<body hx-headers>``): a form on another site can do neither. The ``Host`` header is
checked before this, by Starlette's ``TrustedHostMiddleware``, against DNS rebinding.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD"})
TOKEN_HEADER = "x-rlf-token"
CSRF_HEADER = "x-rlf-csrf"
MIN_TOKEN_CHARS = 16
"""The shortest token a user may choose (``rlf ui --token``); the UI's own are 32 characters."""


def new_token() -> str:
    """A fresh secret for one start of the UI."""
    return secrets.token_urlsafe(24)


class Secret:
    """The start's token and what follows from it: the cookie's name and the CSRF token."""

    def __init__(self, token: str):
        if len(token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the UI's token must be at least {MIN_TOKEN_CHARS} characters")
        self.token = token
        digest = hashlib.sha256(token.encode()).hexdigest()
        # Cookies ignore the port: a name of its own keeps two UIs on one host from overwriting each other.
        self.cookie = f"rlf_ui_{digest[:12]}"
        self.csrf = hmac.new(token.encode(), b"rlf-ui-csrf", hashlib.sha256).hexdigest()

    def matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())


def refusal(status: int, message: str) -> Response:
    return PlainTextResponse(f"rlf ui: {message}\n", status_code=status, headers={"Cache-Control": "no-store"})


class Access:
    """ASGI middleware that lets a request through only with the start's secret (see the module)."""

    def __init__(self, app: ASGIApp, secret: Secret):
        self.app = app
        self.secret = secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = self.check(Request(scope))
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    def check(self, request: Request) -> Response | None:
        """None to let the request through, else the response that refuses (or logs in) the caller."""
        given = request.query_params.get("token")
        if given is not None:
            if not self.secret.matches(given):
                return refusal(403, "wrong token: open the URL that `rlf ui` printed when it started")
            if request.method not in SAFE_METHODS:
                return refusal(403, "send the token in the X-RLF-Token header, not in the URL, to change anything")
            return self.login(request.url)
        auth = request.headers.get("authorization", "")
        header = request.headers.get(TOKEN_HEADER) or (auth[7:] if auth.lower().startswith("bearer ") else None)
        if header is not None:
            # A header no other site's page can set: the request is the caller's own, no CSRF check needed.
            return None if self.secret.matches(header) else refusal(403, "wrong token in the request's header")
        if not self.secret.matches(request.cookies.get(self.secret.cookie)):
            return refusal(
                403,
                "this page needs the UI's token: open the URL that `rlf ui` printed when it started "
                "(http://HOST:PORT/?token=...)",
            )
        if request.method in SAFE_METHODS:
            return None
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin != own:
            return refusal(403, f"cross-origin request refused: Origin {origin or '(none)'} is not {own}")
        if not hmac.compare_digest(request.headers.get(CSRF_HEADER, "").encode(), self.secret.csrf.encode()):
            return refusal(403, "missing or wrong CSRF token: reload the page and try again")
        return None

    def login(self, url: URL) -> Response:
        """Trade the token in the URL for the cookie, and show the same page without the token."""
        target = url.remove_query_params("token")
        response = RedirectResponse(target.path + (f"?{target.query}" if target.query else ""), status_code=303)
        response.set_cookie(self.secret.cookie, self.secret.token, httponly=True, samesite="strict", path="/")
        response.headers["Cache-Control"] = "no-store"
        return response
