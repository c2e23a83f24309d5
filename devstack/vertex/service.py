"""gRPC face of the emulator: the JobService method paths Relaunch calls, plus GetOperation.

Every served call first passes the injected faults and the quota; any other method of
JobService (or any other service) is left unhandled, which gRPC answers with UNIMPLEMENTED.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from google.cloud.aiplatform_v1 import (
    CancelCustomJobRequest,
    CreateCustomJobRequest,
    CustomJob,
    DeleteCustomJobRequest,
    GetCustomJobRequest,
    ListCustomJobsRequest,
    ListCustomJobsResponse,
)
from google.longrunning import operations_pb2

from devstack.calls import CallLog
from devstack.vertex.errors import ApiError
from devstack.vertex.faults import ApiFaults, Quotas

log = logging.getLogger(__name__)

_JOB_SERVICE = "/google.cloud.aiplatform.v1.JobService/"


def _serialize_protobuf(message: Any) -> bytes:
    return message.SerializeToString()


@dataclass(frozen=True)
class _Method:
    call: Callable[[Any], Any]
    deserialize: Callable[[bytes], Any]
    serialize: Callable[[Any], bytes]
    is_create: bool = False


class JobServiceBackend(Protocol):
    """What the gRPC face needs of the emulator (so this module never imports it)."""

    faults: ApiFaults
    quotas: Quotas
    calls: CallLog

    def create_custom_job(self, request: CreateCustomJobRequest) -> CustomJob: ...
    def get_custom_job(self, request: GetCustomJobRequest) -> CustomJob: ...
    def list_custom_jobs(self, request: ListCustomJobsRequest) -> ListCustomJobsResponse: ...
    def cancel_custom_job(self, request: CancelCustomJobRequest) -> Any: ...
    def delete_custom_job(self, request: DeleteCustomJobRequest) -> operations_pb2.Operation: ...
    def get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation: ...
    def take_lost_create_reply(self) -> bool: ...


class JobServiceHandler(grpc.GenericRpcHandler):
    def __init__(self, emulator: JobServiceBackend) -> None:
        self._emulator = emulator
        self._methods = {
            _JOB_SERVICE + "CreateCustomJob": _Method(
                emulator.create_custom_job, CreateCustomJobRequest.deserialize, CustomJob.serialize, True
            ),
            _JOB_SERVICE + "GetCustomJob": _Method(
                emulator.get_custom_job, GetCustomJobRequest.deserialize, CustomJob.serialize
            ),
            _JOB_SERVICE + "ListCustomJobs": _Method(
                emulator.list_custom_jobs, ListCustomJobsRequest.deserialize, ListCustomJobsResponse.serialize
            ),
            _JOB_SERVICE + "CancelCustomJob": _Method(
                emulator.cancel_custom_job, CancelCustomJobRequest.deserialize, _serialize_protobuf
            ),
            _JOB_SERVICE + "DeleteCustomJob": _Method(
                emulator.delete_custom_job, DeleteCustomJobRequest.deserialize, _serialize_protobuf
            ),
            "/google.longrunning.Operations/GetOperation": _Method(
                emulator.get_operation, operations_pb2.GetOperationRequest.FromString, _serialize_protobuf
            ),
        }

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = self._methods.get(handler_call_details.method)
        if method is None:
            return None
        return grpc.unary_unary_rpc_method_handler(
            self._guarded(handler_call_details.method.rsplit("/", 1)[-1], method),
            request_deserializer=method.deserialize,
            response_serializer=method.serialize,
        )

    def _guarded(self, name: str, method: _Method) -> Callable[[Any, grpc.ServicerContext], Any]:
        def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
            self._emulator.calls.record(name, getattr(request, "name", "") or "")
            self._emulator.delays.apply(name, request)  # injected latency, if any (ApiDelays)
            fault = self._emulator.faults.draw()
            if fault is not None:
                context.abort(fault, f"devstack: injected {fault.name} fault.")
            over_quota = self._emulator.quotas.admit(method.is_create)
            if over_quota is not None:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, over_quota)
            try:
                reply = method.call(request)
            except ApiError as error:
                context.abort(error.code, error.message)
            except Exception:
                # A bug in the stand-in: say so in its log instead of a bare UNKNOWN to the client.
                log.exception("vertex stand-in failed to serve %s", type(request).__name__)
                context.abort(grpc.StatusCode.INTERNAL, "devstack: internal error in the Vertex stand-in.")
            if method.is_create and self._emulator.take_lost_create_reply():
                # Served, then the reply is lost: the job exists, the caller sees a deadline.
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            return reply

        return behaviour
