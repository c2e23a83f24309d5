"""What a job runner needs of the emulator, as a protocol: the runner never imports the emulator."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from google.cloud.aiplatform_v1 import JobState
from google.rpc import status_pb2

from devstack.vertex.behaviour import VertexBehaviour

if TYPE_CHECKING:
    from devstack.vertex.jobrun import JobRecord


class JobHost(Protocol):
    """The emulator as one job's runner sees it: its lock, its settings, its state changes."""

    changed: threading.Condition
    stopping: bool
    region: str
    workdir: str
    python_bin_dir: str
    provisioning_seconds: float
    kill_grace_seconds: float
    behaviour: VertexBehaviour

    def advance(self, record: JobRecord, state: JobState) -> None: ...

    def finish(self, record: JobRecord, state: JobState, error: status_pb2.Status | None = None) -> None: ...

    def set_error(self, record: JobRecord, error: status_pb2.Status) -> None: ...

    def service_log(self, record: JobRecord, text: str) -> None: ...

    def stockout_queues_jobs(self) -> bool: ...

    def stockout_fails(self) -> bool: ...

    def quota_holds_new_jobs(self) -> bool: ...
