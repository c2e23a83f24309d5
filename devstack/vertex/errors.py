"""The one exception the JobService stand-in raises to answer an RPC with a non-OK status."""

from __future__ import annotations

import grpc


class ApiError(Exception):
    """An RPC answered with a non-OK status; the gRPC layer turns it into the status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
