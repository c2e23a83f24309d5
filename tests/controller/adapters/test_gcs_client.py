"""The storage client `make_client` builds: whatever the environment asks of requests still
applies. Without proxies (whose exclusions depend on the URL) the environment is read once, when
the client is made, not on every call."""

from __future__ import annotations

import socket

import pytest
import requests

from controller.adapters.gcs import make_client
from tests.support.gcs import gcs_client_with_bucket

BUCKET = "client-env"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def stand_in():
    with gcs_client_with_bucket(BUCKET) as client:
        yield client


def test_without_proxy_settings_the_client_reaches_the_stand_in(stand_in, monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)

    bucket = make_client().get_bucket(BUCKET, retry=None, timeout=10)

    assert bucket.name == BUCKET


def test_a_proxy_named_in_the_environment_is_used(stand_in, monkeypatch):
    """Nothing listens at the proxy's address: the call fails there, so it went to the proxy."""
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)

    with pytest.raises(requests.exceptions.ProxyError):
        make_client().get_bucket(BUCKET, retry=None, timeout=10)


def test_a_ca_bundle_in_the_environment_is_taken_once_when_the_client_is_made(
    stand_in, monkeypatch, tmp_path
):
    """The bundle still applies to every call; the environment is not read again per call (a
    proxy named afterwards is not used), which is what a call's CPU was spent on."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    client = make_client()

    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    bucket = client.get_bucket(BUCKET, retry=None, timeout=10)

    assert bucket.name == BUCKET
    applied = client._http.merge_environment_settings(
        "https://storage.googleapis.com/storage/v1/b", {}, None, None, None
    )
    assert applied["verify"] == str(bundle)
