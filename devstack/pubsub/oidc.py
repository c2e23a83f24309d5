"""Google-style OIDC ID tokens for push requests, and the certificates that verify them.

Push subscriptions with `push_config.oidc_token` send `Authorization: Bearer <JWT>`: an RS256 ID
token like the ones Google signs for a service account. Here a local RSA key signs them, and
`CertsServer` publishes the matching X.509 certificate as `{kid: PEM}` JSON, the format
`google.oauth2.id_token.verify_token(..., certs_url=...)` downloads.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

ISSUER = "https://accounts.google.com"
CERTS_PATH = "/oauth2/v1/certs"
# JWK form of the same key, as Google also serves it (v3); handy for other verifiers.
JWKS_PATH = "/oauth2/v3/certs"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _uint_b64url(number: int) -> str:
    return _b64url(number.to_bytes((number.bit_length() + 7) // 8, "big"))


class TokenSigner:
    """Holds the signing key; `mint` builds ID tokens, `forged=True` signs with a key nobody
    publishes (same kid), so the signature check is what rejects it."""

    def __init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._forger_key: rsa.RSAPrivateKey | None = None
        self._forger_lock = threading.Lock()
        public_der = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.kid = hashlib.sha1(public_der).hexdigest()
        self.certificate_pem = (
            self._self_signed_certificate().public_bytes(serialization.Encoding.PEM).decode()
        )

    def _self_signed_certificate(self) -> x509.Certificate:
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "devstack-pubsub-oidc")])
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365))
            .sign(self._key, hashes.SHA256())
        )

    def certs_json(self) -> bytes:
        return json.dumps({self.kid: self.certificate_pem}).encode()

    def jwks_json(self) -> bytes:
        numbers = self._key.public_key().public_numbers()
        jwk = {
            "kty": "RSA",
            "alg": "RS256",
            "use": "sig",
            "kid": self.kid,
            "n": _uint_b64url(numbers.n),
            "e": _uint_b64url(numbers.e),
        }
        return json.dumps({"keys": [jwk]}).encode()

    def mint(
        self,
        audience: str,
        email: str,
        *,
        expires_in: float = 3600,
        forged: bool = False,
        issued_at: float | None = None,
    ) -> str:
        issued = int(time.time() if issued_at is None else issued_at)
        claims = {
            "iss": ISSUER,
            "aud": audience,
            "azp": hashlib.sha256(email.encode()).hexdigest()[:21],
            "email": email,
            "email_verified": True,
            # Google puts the service account's numeric unique id here; a stable digest stands in.
            "sub": str(int(hashlib.sha256(email.encode()).hexdigest()[:16], 16)),
            "iat": issued,
            "exp": int(issued + expires_in),
        }
        return self.sign({"alg": "RS256", "kid": self.kid, "typ": "JWT"}, claims, forged=forged)

    def sign(self, header: object, claims: object, *, forged: bool = False) -> str:
        """An RS256 signature over any header and claims, whatever they hold: tests of a verifier
        need tokens that are well signed yet malformed (a string `exp`, an unknown `alg`)."""
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        key = self._forger() if forged else self._key
        signature = key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    def _forger(self) -> rsa.RSAPrivateKey:
        with self._forger_lock:
            if self._forger_key is None:
                self._forger_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            return self._forger_key


class CertsServer:
    """Serves the signer's certificates over HTTP on a background thread."""

    def __init__(self, signer: TokenSigner, host: str = "127.0.0.1", port: int = 0):
        documents = {CERTS_PATH: signer.certs_json(), JWKS_PATH: signer.jwks_json()}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = documents.get(self.path.split("?")[0])
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Cache-Control", "public, max-age=3600")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="pubsub-oidc-certs", daemon=True
        )
        self._thread.start()

    @property
    def certs_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{CERTS_PATH}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
