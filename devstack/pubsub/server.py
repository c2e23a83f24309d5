"""Assembles the emulator: the gRPC server, the push sender and the OIDC certificate server."""

from __future__ import annotations

from concurrent import futures

import grpc

from devstack.pubsub.broker import Broker
from devstack.pubsub.oidc import CertsServer, TokenSigner
from devstack.pubsub.push import PushSender
from devstack.pubsub.services import PublisherService, SubscriberService

# Every open StreamingPull holds a server thread for its lifetime, so leave plenty.
_GRPC_THREADS = 64
# gRPC's default 4 MiB receive limit would turn a 5 MB publish into RESOURCE_EXHAUSTED, which the
# client retries until its deadline. Accept well above Pub/Sub's 10 MB so that the broker, not
# the transport, answers an oversized publish with the service's INVALID_ARGUMENT; beyond this
# gRPC itself answers RESOURCE_EXHAUSTED. Responses hold at most ~10 MB of messages (broker).
MAX_GRPC_MESSAGE_BYTES = 32 * 1024 * 1024


class PubSubEmulator:
    """A running Pub/Sub stand-in. Point clients at it with PUBSUB_EMULATOR_HOST=`host_port`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, min_ack_deadline_seconds: float = 1.0):
        self.broker = Broker(min_ack_deadline_seconds=min_ack_deadline_seconds)
        self._signer = TokenSigner()
        self._certs = CertsServer(self._signer, host=host)
        self._subscriber = SubscriberService(self.broker)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=_GRPC_THREADS, thread_name_prefix="pubsub-grpc"),
            handlers=[PublisherService(self.broker).handler(), self._subscriber.handler()],
            options=[
                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
            ],
        )
        bound = self._server.add_insecure_port(f"{host}:{port}")
        if not bound:
            self._certs.stop()
            raise OSError(f"cannot bind the Pub/Sub emulator to {host}:{port}")
        self.host_port = f"{host}:{bound}"
        self._server.start()
        self._push = PushSender(self.broker, self._signer)
        self._stopped = False

    @property
    def certs_url(self) -> str:
        """Where `google.oauth2.id_token.verify_token(..., certs_url=...)` finds the push keys."""
        return self._certs.certs_url

    def mint_token(
        self,
        audience: str,
        email: str,
        *,
        expires_in: float = 3600,
        forged: bool = False,
        issued_at: float | None = None,
    ) -> str:
        """An ID token like the ones push requests carry; `forged=True` signs it with a key that
        `certs_url` does not publish. A negative `expires_in` or an old `issued_at` gives an
        expired one."""
        return self._signer.mint(audience, email, expires_in=expires_in, forged=forged, issued_at=issued_at)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._push.stop()
        self._subscriber.close_streams()
        self._server.stop(grace=1).wait(5)
        self._certs.stop()

    def __enter__(self) -> PubSubEmulator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def start_pubsub(
    host: str = "127.0.0.1", port: int = 0, *, min_ack_deadline_seconds: float = 1.0
) -> PubSubEmulator:
    """Start the emulator (port 0 = any free port) and return it running."""
    return PubSubEmulator(host, port, min_ack_deadline_seconds=min_ack_deadline_seconds)
