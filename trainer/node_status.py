"""How the workers of one node tell their launcher what happened (stdlib only).

The elastic agent loses worker exit codes when it is itself signalled, so every worker writes
its outcome into a node-local directory that the launcher reads after the workers are gone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

ENV_VAR = "RELAUNCH_NODE_STATUS_DIR"
# Set by the launcher for its workers: this replica's name in exit records (workerpoolN-I, node-K).
REPLICA_ENV = "RELAUNCH_REPLICA"


@dataclass(frozen=True)
class WorkerOutcome:
    local_rank: int
    exit_code: int
    exit_record_written: bool
    reason: str | None = None  # why this worker stopped (a replica exit reason)
    signalled: bool = False  # this worker itself received SIGTERM
    detail: str | None = None  # what broke the gang (a peer loss), or the exception's type and last line
    step: int | None = None  # the step the worker stopped at, when it got that far


class NodeStatus:
    def __init__(self, directory: str | None):
        self.directory = directory

    @classmethod
    def from_env(cls) -> NodeStatus:
        return cls(os.environ.get(ENV_VAR) or None)

    def _write(self, name: str, payload: dict) -> None:
        if not self.directory:
            return
        tmp = os.path.join(self.directory, f".{name}.tmp")
        with open(tmp, "w") as fh:
            json.dump(payload, fh)
        os.replace(tmp, os.path.join(self.directory, name))

    def mark_started(self, local_rank: int) -> None:
        self._write(f"started-{local_rank}", {"pid": os.getpid()})

    def mark_exited(
        self,
        local_rank: int,
        exit_code: int,
        exit_record_written: bool,
        reason: str | None = None,
        signalled: bool = False,
        detail: str | None = None,
        step: int | None = None,
    ) -> None:
        self._write(
            f"exit-{local_rank}",
            {
                "exitCode": exit_code,
                "exitRecordWritten": exit_record_written,
                "reason": reason,
                "signalled": signalled,
                "detail": detail,
                "step": step,
            },
        )

    def any_started(self) -> bool:
        return bool(self.directory) and any(n.startswith("started-") for n in os.listdir(self.directory))

    def outcomes(self, nproc: int) -> list[WorkerOutcome | None]:
        """One entry per local rank; None where the worker never reported (killed or crashed hard)."""
        found: list[WorkerOutcome | None] = []
        for local_rank in range(nproc):
            try:
                with open(os.path.join(self.directory or "", f"exit-{local_rank}")) as fh:
                    doc = json.load(fh)
                found.append(
                    WorkerOutcome(
                        local_rank,
                        int(doc["exitCode"]),
                        bool(doc["exitRecordWritten"]),
                        doc.get("reason"),
                        bool(doc.get("signalled")),
                        doc.get("detail"),
                        doc.get("step") if isinstance(doc.get("step"), int) else None,
                    )
                )
            except (OSError, ValueError, KeyError):
                found.append(None)
        return found
