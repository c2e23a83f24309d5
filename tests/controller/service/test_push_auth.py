"""Push token verification against the Pub/Sub stand-in's real RS256 tokens and certs URL."""

from __future__ import annotations

import pytest

from controller.service.push_auth import PushAuthError, PushVerifier
from devstack.pubsub import start_pubsub

AUDIENCE = "https://relaunch.example.run.app/pubsub/push"
PUSHER = "pubsub-push@relaunch-dev.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def pubsub():
    with start_pubsub() as emulator:
        yield emulator


@pytest.fixture
def verifier(pubsub):
    return PushVerifier(AUDIENCE, PUSHER, certs_url=pubsub.certs_url)


def refused(verifier: PushVerifier, header: str | None) -> PushAuthError:
    with pytest.raises(PushAuthError) as caught:
        verifier.verify(header)
    return caught.value


def test_valid_token_yields_its_claims(pubsub, verifier):
    claims = verifier.verify(f"Bearer {pubsub.mint_token(AUDIENCE, PUSHER)}")
    assert claims.email == PUSHER
    assert claims.audience == AUDIENCE
    assert claims.issuer == "https://accounts.google.com"
    assert claims.subject


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Basic dXNlcjpwdw==",
        "Bearer",
        "Bearer not-a-jwt",
        "Bearer a.b.c",
        "Bearer eyJhbGciOiJub25lIn0.e30.",
    ],
)
def test_absent_or_malformed_authorization_is_401(verifier, header):
    assert refused(verifier, header).status == 401


def test_expired_token_is_401(pubsub, verifier):
    token = pubsub.mint_token(AUDIENCE, PUSHER, expires_in=-120)
    error = refused(verifier, f"Bearer {token}")
    assert error.status == 401 and "expired" in error.reason.lower()


def test_token_for_another_audience_is_401(pubsub, verifier):
    token = pubsub.mint_token("https://someone-else.example.com/push", PUSHER)
    error = refused(verifier, f"Bearer {token}")
    assert error.status == 401 and "audience" in error.reason


def test_forged_signature_is_401(pubsub, verifier):
    error = refused(verifier, f"Bearer {pubsub.mint_token(AUDIENCE, PUSHER, forged=True)}")
    assert error.status == 401 and "signature" in error.reason


def test_valid_token_of_another_service_account_is_403(pubsub, verifier):
    token = pubsub.mint_token(AUDIENCE, "intruder@other-project.iam.gserviceaccount.com")
    error = refused(verifier, f"Bearer {token}")
    assert error.status == 403 and "intruder@" in error.reason


def test_certificates_are_fetched_once_for_many_pushes(pubsub, verifier):
    for _ in range(5):
        verifier.verify(f"Bearer {pubsub.mint_token(AUDIENCE, PUSHER)}")
    assert verifier.request.fetches == 1


def test_unreachable_certificates_are_503_so_pubsub_retries(pubsub):
    broken = PushVerifier(AUDIENCE, PUSHER, certs_url=pubsub.certs_url + "-missing")
    assert refused(broken, f"Bearer {pubsub.mint_token(AUDIENCE, PUSHER)}").status == 503


def test_a_verifier_without_audience_fails_at_start_up(pubsub):
    with pytest.raises(ValueError, match="RELAUNCH_PUSH_AUDIENCE"):
        PushVerifier("", PUSHER, certs_url=pubsub.certs_url)
