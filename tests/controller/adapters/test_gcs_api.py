"""The state store's JSON API calls (controller/adapters/gcs_api.py) against the GCS stand-in:
what they write is what the storage library reads back, refusals come back as the library's
exceptions, damaged bytes and silent servers are caught, and proxies are still honoured."""

from __future__ import annotations

import os
import socket
import threading

import pytest
import requests
import urllib3
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from controller.adapters import gcs
from controller.adapters.gcs_api import ChecksumMismatch, JsonApi, crc32c_b64
from devstack.gcs import start_gcs
from tests.support.gcs import FlakyProxy

BUCKET = "json-api"


@pytest.fixture(scope="module")
def stand_in():
    with start_gcs() as emulator, pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", emulator.url)
        client = storage.Client(project="relaunch-dev", credentials=AnonymousCredentials())
        client.create_bucket(BUCKET)
        yield emulator, client


def _library_client() -> storage.Client:
    return storage.Client(project="relaunch-dev", credentials=AnonymousCredentials())


def test_a_write_is_one_request_with_bytes_metadata_and_checksum(stand_in):
    emulator, client = stand_in
    api = JsonApi(client)
    data = b'{"format": "x", "n": 1}'
    emulator.calls.reset()

    generation = api.conditional_upload(
        BUCKET, "w/one.json", data, if_generation_match=0, metadata={"relaunch-live": "1"}, timeout=10
    )

    assert emulator.calls.counts() == {"POST upload": 1}
    blob = client.bucket(BUCKET).get_blob("w/one.json")
    assert blob.download_as_bytes() == data
    assert blob.generation == generation
    assert blob.content_type == "application/json"
    assert blob.metadata["relaunch-live"] == "1"
    assert blob.metadata[gcs.WRITE_ID_KEY]  # names the write, for a retry that meets 412
    assert blob.crc32c == crc32c_b64(data)


def test_reads_and_refusals_answer_as_the_library_does(stand_in):
    _, client = stand_in
    api = JsonApi(client)
    blob = client.bucket(BUCKET).blob("r/doc.json")
    blob.upload_from_string(b"first")

    assert api.download(BUCKET, "r/doc.json", timeout=10) == (b"first", blob.generation)
    assert api.download(BUCKET, "r/doc.json", timeout=10, if_generation_match=blob.generation)[0] == b"first"
    with pytest.raises(gexc.PreconditionFailed):
        api.download(BUCKET, "r/doc.json", timeout=10, if_generation_match=blob.generation + 1)
    with pytest.raises(gexc.NotFound):
        api.download(BUCKET, "r/none.json", timeout=10)
    assert api.metadata(BUCKET, "r/none.json", timeout=10) is None
    with pytest.raises(gexc.PreconditionFailed):  # create-only over an existing object
        api.upload(
            BUCKET,
            "r/doc.json",
            b"x",
            if_generation_match=0,
            metadata={},
            content_type="text/plain",
            timeout=10,
        )
    with pytest.raises(gexc.PreconditionFailed):
        api.delete(BUCKET, "r/doc.json", if_generation_match=blob.generation + 1, timeout=10)
    assert client.bucket(BUCKET).get_blob("r/doc.json") is not None

    api.delete(BUCKET, "r/doc.json", if_generation_match=blob.generation, timeout=10)

    assert client.bucket(BUCKET).get_blob("r/doc.json") is None


def test_a_listing_comes_in_pages(stand_in):
    _, client = stand_in
    api = JsonApi(client)
    for i in range(5):
        client.bucket(BUCKET).blob(f"l/{i}.json").upload_from_string(b"{}")
    fields = "items(name,generation),nextPageToken"

    first, token = api.list_page(BUCKET, "l/", page_size=3, fields=fields, page_token=None, timeout=10)
    second, last = api.list_page(BUCKET, "l/", page_size=3, fields=fields, page_token=token, timeout=10)

    assert [item["name"] for item in first + second] == [f"l/{i}.json" for i in range(5)]
    assert len(first) == 3 and token and last is None


def test_damaged_bytes_are_refused_not_returned(stand_in):
    _, client = stand_in
    client.bucket(BUCKET).blob("c/doc.json").upload_from_string(b'{"fence": 7}')
    proxy = FlakyProxy(os.environ["STORAGE_EMULATOR_HOST"])
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("STORAGE_EMULATOR_HOST", proxy.url)
            api = JsonApi(_library_client())
        proxy.corrupt_next()
        with pytest.raises(ChecksumMismatch):
            api.download(BUCKET, "c/doc.json", timeout=10)
        assert api.download(BUCKET, "c/doc.json", timeout=10)[0] == b'{"fence": 7}'
    finally:
        proxy.stop()


class _SilentServer:
    """Accepts connections, reads what is sent and never answers."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections.append(conn)

    def stop(self) -> None:
        self._listener.close()
        for conn in self.connections:
            conn.close()


def test_a_server_that_never_answers_times_out_and_is_retried_then_given_up(monkeypatch):
    server = _SilentServer()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
        api = JsonApi(_library_client())

        with pytest.raises(urllib3.exceptions.ReadTimeoutError):
            gcs.call(lambda: api.download(BUCKET, "s/doc.json", timeout=0.2), attempts=3)

        assert len(server.connections) == 3  # each try on a fresh connection, none left hanging
    finally:
        server.stop()


def test_a_proxy_named_in_the_environment_is_used(stand_in, monkeypatch):
    """Nothing listens at the proxy's address: the call fails there, so it went to the proxy."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{closed}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    api = JsonApi(gcs.make_client())

    with pytest.raises(requests.exceptions.ProxyError):
        api.download(BUCKET, "p/doc.json", timeout=10)


def test_failures_of_the_bare_pool_are_transient_and_answers_are_not():
    assert gcs.is_transient(urllib3.exceptions.ReadTimeoutError(None, "/o", "read timed out"))
    assert gcs.is_transient(urllib3.exceptions.NewConnectionError(None, "connection refused"))
    assert gcs.is_transient(urllib3.exceptions.ProtocolError("Connection aborted."))
    assert not gcs.is_transient(gexc.PreconditionFailed("412"))
    assert not gcs.is_transient(gexc.NotFound("404"))
    assert not gcs.is_transient(ChecksumMismatch("damaged"))
