"""`python -m devstack.pubsub --port N`: run the Pub/Sub stand-in in the foreground."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from devstack.pubsub import start_pubsub


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devstack.pubsub", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8085, help="gRPC port (0 = any free port)")
    parser.add_argument(
        "--min-ack-deadline", type=float, default=1.0, help="smallest ack deadline accepted (s)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with start_pubsub(args.host, args.port, min_ack_deadline_seconds=args.min_ack_deadline) as emulator:
        print(f"export PUBSUB_EMULATOR_HOST={emulator.host_port}", flush=True)
        print(f"# OIDC certs for push tokens: {emulator.certs_url}", flush=True)
        try:
            done.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
