"""Checks the OIDC ID token Pub/Sub attaches to each push request.

A push subscription with `oidc_token` sends `Authorization: Bearer <JWT>` signed by Google for the
push service account. We accept a push only when the token is well formed, signed by a published
key, unexpired, issued by Google, meant for our audience (401 otherwise), and names the expected
service account with a verified email (403 otherwise).

The signing certificates are fetched through a small caching transport: without it every push
would download Google's certificates again.

Anyone can send a token, so whatever it holds (any size, any nesting, a claim of any JSON type,
an algorithm google-auth does not know) ends in 401 or 403, never in an exception the HTTP layer
would answer with 500: the shape is checked before any decoder runs, and whatever google-auth or
the claim checks raise beyond what they document is a 401 too.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import google.auth.transport
import google.auth.transport.requests
from google.auth import exceptions as auth_errors
from google.oauth2 import id_token

from controller import logs
from controller.request.nesting import nests_too_deeply

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
GOOGLE_ISSUERS = frozenset({"accounts.google.com", "https://accounts.google.com"})
# Google's ID tokens are about a kilobyte; nothing legitimate comes near this.
MAX_TOKEN_BYTES = 8192

_log = logs.get("relaunch.push_auth")


class PushAuthError(Exception):
    """The push is refused: `status` 401 (who are you?) or 403 (not allowed); 503 when the
    signing certificates cannot be fetched (Pub/Sub retries)."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Claims:
    email: str
    subject: str
    audience: str
    issuer: str
    expires_at: int
    raw: Mapping[str, Any] = field(repr=False)


class _CachedResponse(google.auth.transport.Response):
    def __init__(self, status: int, headers: Mapping[str, str], data: bytes):
        self._status, self._headers, self._data = status, dict(headers), data

    @property
    def status(self) -> int:
        return self._status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    @property
    def data(self) -> bytes:
        return self._data


class CachingRequest(google.auth.transport.Request):
    """A google-auth transport that remembers successful GET answers for `ttl_seconds`.

    Only the certificate download goes through it, so caching by URL is exact enough.
    """

    def __init__(
        self,
        inner: google.auth.transport.Request | None = None,
        ttl_seconds: float = 300.0,
        timeout_seconds: float = 10.0,
    ):
        self._inner = inner or google.auth.transport.requests.Request()
        self._ttl = ttl_seconds
        self._timeout = timeout_seconds
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, _CachedResponse]] = {}
        self.fetches = 0  # downloads actually made; tests and logs read it

    def __call__(self, url, method="GET", body=None, headers=None, timeout=None, **kwargs):
        if method != "GET":
            return self._inner(
                url, method=method, body=body, headers=headers, timeout=timeout or self._timeout, **kwargs
            )
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(url)
            if hit is not None and now - hit[0] < self._ttl:
                return hit[1]
        # Fetch outside the lock: a slow download must not block pushes that hit the cache.
        response = self._inner(url, method="GET", headers=headers, timeout=timeout or self._timeout, **kwargs)
        cached = _CachedResponse(response.status, response.headers, response.data)
        with self._lock:
            self.fetches += 1
            if cached.status == 200:
                self._cache[url] = (time.monotonic(), cached)
        return cached

    def age(self, url: str) -> float | None:
        with self._lock:
            hit = self._cache.get(url)
        return None if hit is None else time.monotonic() - hit[0]

    def forget(self, url: str) -> None:
        with self._lock:
            self._cache.pop(url, None)


class PushVerifier:
    # An unknown key id may mean Google rotated its keys since we cached them: refetch, but at
    # most this often, so tokens with made-up key ids cannot turn every push into a download.
    REFETCH_INTERVAL_SECONDS = 60.0

    def __init__(
        self,
        audience: str,
        service_account: str,
        certs_url: str | None = None,
        clock_skew_seconds: int = 10,
        *,
        request: google.auth.transport.Request | None = None,
        cache_seconds: float = 300.0,
    ):
        if not audience or not service_account:
            # An empty audience would refuse every push with 401; better to fail at start-up.
            raise ValueError(
                "push verification needs an audience (RELAUNCH_PUSH_AUDIENCE) and a "
                "service account (RELAUNCH_PUSH_SERVICE_ACCOUNT)"
            )
        self.audience = audience
        self.service_account = service_account
        self.certs_url = certs_url or GOOGLE_CERTS_URL
        self.clock_skew_seconds = int(clock_skew_seconds)
        self.request = CachingRequest(request, ttl_seconds=cache_seconds)

    def verify(self, authorization_header: str | None) -> Claims:
        token = _bearer_token(authorization_header)
        _check_shape(token)
        try:
            return self._claims(self._verified_payload(token))
        except PushAuthError:
            raise
        except Exception as error:
            # google-auth documents ValueError subclasses, but a claim of an unexpected type
            # (a string `exp`) raises TypeError from inside it: still the sender's token at fault.
            raise PushAuthError(401, f"invalid token: {type(error).__name__} checking its claims") from error

    def _claims(self, payload: Mapping[str, Any]) -> Claims:
        issuer = payload.get("iss")
        if not isinstance(issuer, str) or issuer not in GOOGLE_ISSUERS:
            raise PushAuthError(401, f"token issued by {_short(issuer)}, not Google")
        email = payload.get("email")
        if email != self.service_account:
            raise PushAuthError(403, f"token is for {_short(email)}, not the push service account")
        if payload.get("email_verified") not in (True, "true"):
            raise PushAuthError(403, "token email is not verified")
        expires_at = payload.get("exp")
        if (
            isinstance(expires_at, bool)
            or not isinstance(expires_at, (int, float))
            or expires_at != expires_at
        ):
            raise PushAuthError(401, "token expiry (exp) is not a number")
        return Claims(
            email=email,
            subject=str(payload.get("sub", "")),
            audience=str(payload.get("aud")),
            issuer=issuer,
            expires_at=int(min(expires_at, 2**63)),
            raw=dict(payload),
        )

    def _verified_payload(self, token: str) -> Mapping[str, Any]:
        try:
            return self._verify_once(token)
        except auth_errors.MalformedError as error:
            if not (isinstance(error.__cause__, KeyError) and self._may_refetch()):
                raise PushAuthError(401, f"invalid token: {error}") from error
            _log.info("unknown signing key id, refetching push certificates", certs_url=self.certs_url)
            self.request.forget(self.certs_url)
        except ValueError as error:
            raise PushAuthError(401, f"invalid token: {error}") from error
        try:
            return self._verify_once(token)
        except ValueError as error:
            raise PushAuthError(401, f"invalid token: {error}") from error

    def _verify_once(self, token: str) -> Mapping[str, Any]:
        try:
            return id_token.verify_token(
                token,
                self.request,
                audience=self.audience,
                certs_url=self.certs_url,
                clock_skew_in_seconds=self.clock_skew_seconds,
            )
        except auth_errors.TransportError as error:
            _log.error("cannot fetch push token certificates", certs_url=self.certs_url, error=str(error))
            raise PushAuthError(503, "token signing certificates unavailable") from error

    def _may_refetch(self) -> bool:
        age = self.request.age(self.certs_url)
        return age is None or age >= self.REFETCH_INTERVAL_SECONDS


def _check_shape(token: str) -> None:
    """A JWT of a sane size whose header and payload nest no deeper than any real token, checked
    before a JSON decoder recurses into them."""
    if len(token) > MAX_TOKEN_BYTES:
        raise PushAuthError(401, f"token of {len(token)} bytes is larger than any ID token")
    parts = token.split(".")
    if len(parts) != 3:
        raise PushAuthError(401, "token is not a JWT (three dot-separated parts)")
    for part in parts[:2]:
        try:
            decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        except (binascii.Error, ValueError):
            raise PushAuthError(401, "token is not a JWT (a part is not base64url)") from None
        if nests_too_deeply(decoded):
            raise PushAuthError(401, "token is not a JWT (a part nests too deeply)")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bearer_token(header: str | None) -> str:
    if not header:
        raise PushAuthError(401, "no Authorization header")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise PushAuthError(401, "Authorization is not a Bearer token")
    return token.strip()
