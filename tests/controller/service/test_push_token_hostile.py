"""Any token at all is a 401 or a 403, never an exception (issue 28, finding 2): well-signed tokens
with claims of every wrong type, unknown and forged algorithms, mutated text, oversized tokens.

The tokens are signed by devstack's signer and its certificates are served over HTTP by its
certificate server, in this process (no emulator).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.service.http import PUSH_PATH, make_server
from controller.service.metrics import Metrics
from controller.service.push_auth import MAX_TOKEN_BYTES, PushAuthError, PushVerifier
from devstack.pubsub.oidc import CertsServer, TokenSigner
from tests.support.hostile import CONFUSED_VALUES, FRAGMENTS, mutate

AUDIENCE = "https://relaunch.example.run.app/pubsub/push"
PUSHER = "pubsub-push@relaunch-dev.iam.gserviceaccount.com"
SETTINGS = settings(max_examples=300, deadline=None)


@pytest.fixture(scope="module")
def signer():
    return TokenSigner()


@pytest.fixture(scope="module")
def certs(signer):
    server = CertsServer(signer)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def verifier(certs):
    return PushVerifier(AUDIENCE, PUSHER, certs_url=certs.certs_url)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def good_claims() -> dict:
    now = int(time.time())
    return {
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "email": PUSHER,
        "email_verified": True,
        "sub": "1234567890",
        "iat": now,
        "exp": now + 3600,
    }


def outcome(verifier: PushVerifier, token: str) -> int:
    try:
        verifier.verify(f"Bearer {token}")
    except PushAuthError as refusal:
        return refusal.status
    return 200


def test_the_unmutated_token_is_accepted(signer, verifier):
    """The mutations below start from a token that passes: each refusal is the mutation's doing."""
    token = signer.sign({"alg": "RS256", "kid": signer.kid, "typ": "JWT"}, good_claims())
    assert outcome(verifier, token) == 200


CLAIMS = ["iss", "aud", "email", "email_verified", "sub", "iat", "exp", "azp"]
STRING_TIMES = [str(int(time.time()) + 3600), "never", "1e99", ""]
WRONG = st.sampled_from([*CONFUSED_VALUES, *STRING_TIMES, float("inf"), float("-inf"), 10**400])


@SETTINGS
@given(st.dictionaries(st.sampled_from(CLAIMS), WRONG, min_size=1, max_size=3), st.booleans())
def test_well_signed_claims_of_any_wrong_type_are_refused(signer, verifier, wrong, drop):
    claims = {**good_claims(), **wrong}
    if drop:
        claims.pop(next(iter(wrong)))
    status = outcome(verifier, signer.sign({"alg": "RS256", "kid": signer.kid}, claims))
    assert status in (401, 403) or (status == 200 and _still_valid(claims))


def _still_valid(claims: dict) -> bool:
    """A replaced value may happen to keep the token valid (`email_verified: "true"`, `sub: ""`)."""
    return (
        claims.get("iss") in ("accounts.google.com", "https://accounts.google.com")
        and claims.get("email") == PUSHER
        and claims.get("aud") == AUDIENCE
        and claims.get("email_verified") in (True, "true")
    )


HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "alg": st.sampled_from(["none", "None", "HS256", "ES256", "RS512", "", "RS256 ", *CONFUSED_VALUES]),
        "kid": st.sampled_from(["unknown-key", "", "../../etc/passwd", *CONFUSED_VALUES]),
        "typ": WRONG,
        "crit": WRONG,
    },
)


@SETTINGS
@given(HEADERS)
def test_any_header_but_a_known_key_and_rs256_is_refused(signer, verifier, header):
    status = outcome(verifier, signer.sign(header, good_claims()))
    known = header.get("alg") == "RS256" and header.get("kid") in (signer.kid, None, "")
    assert status in (401, 403) or (status == 200 and known)


def test_alg_none_and_hs256_signed_with_the_public_certificate_are_refused(signer, verifier):
    """The two classic JWT forgeries: no signature, and the public key used as an HMAC secret."""
    claims = b64url(json.dumps(good_claims()).encode())
    unsigned = f"{b64url(json.dumps({'alg': 'none', 'kid': signer.kid}).encode())}.{claims}."
    assert outcome(verifier, unsigned) == 401
    header = b64url(json.dumps({"alg": "HS256", "kid": signer.kid, "typ": "JWT"}).encode())
    secret = signer.certificate_pem.encode()
    mac = hmac.new(secret, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    assert outcome(verifier, f"{header}.{claims}.{b64url(mac)}") == 401


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_a_mutated_token_is_refused_or_still_the_same_valid_token(signer, verifier, rng):
    token = signer.sign({"alg": "RS256", "kid": signer.kid}, good_claims())
    mutated = mutate(token.encode(), rng).decode("latin-1")  # as http.server decodes a header
    status = outcome(verifier, mutated)
    assert status in (401, 403) or (status == 200 and _same_token(mutated, token))


def _same_token(mutated: str, token: str) -> bool:
    """The signed part unchanged and the signature decoding to the same bytes: base64 decoding (as
    google-auth does it, on the UTF-8 bytes) skips characters outside its alphabet, so junk in the
    signature part, or a flipped padding bit, leaves the token as valid as it was."""
    signed, _, signature = mutated.encode().rpartition(b".")
    original_signed, _, original_signature = token.encode().rpartition(b".")
    return signed == original_signed and _decoded(signature) == _decoded(original_signature)


def _decoded(part: bytes) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4))
    except ValueError:
        return None


@pytest.mark.parametrize(
    "token_of",
    [
        lambda signer: "x" * (MAX_TOKEN_BYTES + 1),
        lambda signer: signer.sign(
            {"alg": "RS256", "kid": signer.kid}, {**good_claims(), "pad": "x" * 100_000}
        ),
        lambda signer: f"{b64url(b'[' * 5000)}.{b64url(b'{}')}.sig",
        lambda signer: f"{b64url(FRAGMENTS[0])}.{b64url(FRAGMENTS[9])}.sig",
        lambda signer: "a.b.c.d",
        lambda signer: "é.é.é",
        lambda signer: "...",
    ],
    ids=[
        "long",
        "well-signed-100kb",
        "deep-header",
        "huge-number-and-surrogate",
        "four-parts",
        "non-ascii",
        "empty-parts",
    ],
)
def test_oversized_deep_and_misshapen_tokens_are_401(signer, verifier, token_of):
    assert outcome(verifier, token_of(signer)) == 401


def test_a_string_exp_through_the_push_endpoint_is_401_not_500(signer, verifier):
    """Issue 28, finding 2, end to end over HTTP: google-auth's TypeError used to become a 500."""
    claims = {**good_claims(), "exp": str(int(time.time()) + 3600)}
    token = signer.sign({"alg": "RS256", "kid": signer.kid}, claims)
    server = make_server("127.0.0.1", 0, _NoIntake(), Metrics(), verifier).start()
    try:
        reply = requests.post(
            f"http://127.0.0.1:{server.port}{PUSH_PATH}",
            headers={"Authorization": f"Bearer {token}"},
            json={"message": {"data": ""}},
            timeout=10,
        )
    finally:
        server.stop()
    assert reply.status_code == 401


class _NoIntake:
    def accept_request(self, data, attributes, delivery=None):
        raise AssertionError("a refused push must never reach the intake")

    def job_document(self, job_id):
        return None

    def list_job_documents(self):
        return []

    def is_alive(self):
        return True

    def is_ready(self):
        return True, "leader"
