"""One way to talk to Cloud Storage: a client that honours STORAGE_EMULATOR_HOST, a per-call
deadline, and a tenacity retry policy that retries only what may succeed on a second try.

The library's own retries are switched off at every call site (`retry=None`) so there is exactly
one policy, this one, and it never retries a 412/404/400: those are answers, not accidents.
"""

from __future__ import annotations

import os
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import requests
import urllib3
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from controller import logs

# Seconds for one HTTP request to Cloud Storage (connect + read).
CALL_TIMEOUT_SECONDS = 30.0
# The whole retried operation gives up after this long or this many tries, whichever is first.
RETRY_DEADLINE_SECONDS = 60.0
RETRY_ATTEMPTS = 5

# Custom-metadata key that names one write, so a retried conditional write that meets 412 can
# tell "someone else wrote" from "our first try landed, the reply was lost".
WRITE_ID_KEY = "relaunch-write-id"

_TRANSIENT_API_ERRORS = (
    gexc.TooManyRequests,  # 429
    gexc.InternalServerError,  # 500
    gexc.BadGateway,  # 502
    gexc.ServiceUnavailable,  # 503
    gexc.GatewayTimeout,  # 504
)

_log = logs.get("relaunch.gcs")
T = TypeVar("T")


# Connections kept open to Cloud Storage: the queue's workers and the subscriber's callbacks call
# at once, and with requests' default pool (10) every call beyond it opens a connection and
# throws it away afterwards ("Connection pool is full"). Room for the request subscription's
# callbacks at the default RELAUNCH_MAX_OUTSTANDING_MESSAGES (128), the workers and the lease.
POOL_CONNECTIONS = 192


def make_client(project: str | None = None) -> Any:
    """A storage client; against the emulator it uses anonymous credentials (none to look up)."""
    # The library looks up bucket metadata for OpenTelemetry span attributes (which we do not
    # export) around every call, behind one lock, starting a thread per miss and per 404: under
    # concurrent calls it was over half the intake's time. This is its documented off switch.
    os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(
            project=project or os.environ.get("GOOGLE_CLOUD_PROJECT", "relaunch-dev"),
            credentials=AnonymousCredentials(),
        )
    else:
        client = storage.Client(project=project)
    adapter = requests.adapters.HTTPAdapter(pool_maxsize=POOL_CONNECTIONS)
    for scheme in ("https://", "http://"):
        client._http.mount(scheme, adapter)  # the client's own (authorized) session
    if not urllib.request.getproxies_environment():
        # With `trust_env` on, requests scans every variable (proxies) and stats ~/.netrc on each
        # call, a fifth of a state-store call's CPU. Without proxies (whose exclusions depend on
        # the URL) all it would take from the environment is a CA bundle, the same on every call:
        # it is taken once, here, and the per-call scan is switched off.
        bundle = ca_bundle()
        if bundle:
            client._http.verify = bundle
        client._http.trust_env = False
    return client


# The CA bundle requests takes from the environment (in this order) when `trust_env` is on;
# ~/.netrc never applies, the session sends its own token.
_CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def ca_bundle() -> str | None:
    """The CA bundle the environment names for requests, if any."""
    return next((os.environ[name] for name in _CA_BUNDLE_VARIABLES if os.environ.get(name)), None)


def is_transient(exc: BaseException) -> bool:
    """Worth another try: throttling, server errors, broken or timed-out connections."""
    if isinstance(exc, _TRANSIENT_API_ERRORS):
        return True
    if isinstance(exc, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return True
    # The same failures met on a bare urllib3 pool (gcs_api.py): timeouts (connect and read),
    # connections refused, reset or cut mid-answer, TLS failures (requests calls these last
    # ConnectionError too).
    if isinstance(exc, (urllib3.exceptions.TimeoutError, urllib3.exceptions.ProtocolError)):
        return True
    if isinstance(exc, (urllib3.exceptions.SSLError, urllib3.exceptions.ProxyError)):
        return True
    # google-auth wraps network failures while refreshing tokens.
    return isinstance(exc, auth_exc.TransportError)


def retrying(
    *, deadline: float | None = None, attempts: int | None = None, what: str = "gcs call"
) -> Retrying:
    """The policy: exponential backoff with jitter, only for `is_transient` errors."""
    deadline = RETRY_DEADLINE_SECONDS if deadline is None else deadline
    attempts = RETRY_ATTEMPTS if attempts is None else attempts

    def log_retry(state: Any) -> None:
        _log.warning(
            "retrying after a transient error",
            operation=what,
            attempt=state.attempt_number,
            error=repr(state.outcome.exception()),
        )

    return Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts) | stop_after_delay(deadline),
        wait=wait_random_exponential(multiplier=0.2, max=5.0),
        before_sleep=log_retry,
        reraise=True,
    )


def call(fn: Callable[[], T], *, what: str = "gcs call", **policy: Any) -> T:
    """Run `fn` under the retry policy; the last error is re-raised once it gives up."""
    return retrying(what=what, **policy)(fn)


def new_write_id() -> str:
    return uuid.uuid4().hex


def conditional_upload(
    blob: Any,
    data: bytes,
    *,
    if_generation_match: int,
    metadata: dict[str, str] | None = None,
    content_type: str = "application/json",
    timeout: float = CALL_TIMEOUT_SECONDS,
    deadline: float | None = None,
) -> int:
    """Upload `data` only if the object is at `if_generation_match` (0 = must not exist).

    `deadline` bounds the whole retried upload (default: the module's RETRY_DEADLINE_SECONDS).
    Returns the new generation. Raises `google.api_core.exceptions.PreconditionFailed` when the
    precondition does not hold. Retries transient errors; if a retry meets 412 and the live
    object carries this write's id, the earlier try had landed and that counts as success.
    """
    write_id = new_write_id()
    blob.metadata = {**(metadata or {}), WRITE_ID_KEY: write_id}

    def upload() -> int:
        blob.upload_from_string(
            data,
            content_type=content_type,
            if_generation_match=if_generation_match,
            timeout=timeout,
            retry=None,
        )
        return int(blob.generation)

    def read_back() -> tuple[str | None, int] | None:
        live = blob.bucket.get_blob(blob.name, timeout=timeout, retry=None)
        return None if live is None else ((live.metadata or {}).get(WRITE_ID_KEY), int(live.generation))

    return write_once(upload, read_back, write_id, what=blob.name, deadline=deadline)


def write_once(
    upload: Callable[[], int],
    read_back: Callable[[], tuple[str | None, int] | None],
    write_id: str,
    *,
    what: str,
    deadline: float | None = None,
) -> int:
    """Run a conditional `upload` (sending `write_id` in its metadata) under the retry policy.

    Returns the new generation. PreconditionFailed is raised when the precondition does not
    hold, except when a retry meets 412 and `read_back` (the live object's write id and
    generation, or None) shows this write's id: the earlier try had landed, its reply was lost.
    """
    tries = 0

    def attempt() -> int:
        nonlocal tries
        tries += 1
        return upload()

    try:
        return call(attempt, what=f"upload {what}", deadline=deadline)
    except gexc.PreconditionFailed:
        if tries > 1:
            live = call(read_back, what=f"read back {what}", deadline=deadline)
            if live is not None and live[0] == write_id:
                return live[1]
        raise
