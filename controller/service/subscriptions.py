"""The controller's two subscriptions (job requests, Vertex events), opened, supervised and
closed together.

Each stream is a `SupervisedStream` (reopened with backoff when it ends on its own). While any
is down, `controller_degraded` is raised once for the condition "subscriptions", and resolved
when all deliver again. Closing stops pulling and lets in-flight callbacks finish within one
time budget for all streams together.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from google.cloud import pubsub_v1

from controller import logs
from controller.service.alerts import AlertSink
from controller.service.streams import SupervisedStream
from controller.settings import Settings

log = logs.get("relaunch.subscriptions")

STREAMS_CONDITION = "subscriptions"


class Subscriptions:
    def __init__(
        self,
        settings: Settings,
        subscriber: Any,  # pubsub_v1.SubscriberClient
        callbacks: dict[str, tuple[str, Callable[[Any], None]]],  # name -> (subscription, callback)
        alerts: AlertSink,
        holder_id: str,
    ):
        self.settings = settings
        self.subscriber = subscriber
        self.callbacks = callbacks
        self.alerts = alerts
        self.holder_id = holder_id
        self.streams: dict[str, Any] = {}

    def open(self, *which: str) -> None:
        s = self.settings
        flow = pubsub_v1.types.FlowControl(max_messages=s.max_outstanding_messages)
        for name in which or tuple(self.callbacks):
            if name in self.streams:
                continue
            subscription, callback = self.callbacks[name]
            path = s.subscription_path(subscription)
            # Supervised: a stream that ends on its own is reported and reopened with backoff.
            stream = SupervisedStream(
                name,
                functools.partial(self._subscribe, path, callback, flow),
                path,
                max_backoff_seconds=s.stream_retry_max_seconds,
            )
            stream.open()
            self.streams[name] = stream
        log.info("subscriptions opening", streams=sorted(self.streams))

    def _subscribe(self, path: str, callback: Callable[[Any], None], flow: Any) -> Any:
        # One callback thread per message flow control lets out (the library's default is 10):
        # the intake mostly waits on the store, and more requests in flight at once share the
        # store's commits (SQLite) and overlap their round trips (GCS). A fresh pool per open,
        # since a closed stream shuts its scheduler down.
        executor = ThreadPoolExecutor(
            self.settings.max_outstanding_messages, thread_name_prefix="relaunch-callback"
        )
        scheduler = pubsub_v1.subscriber.scheduler.ThreadScheduler(executor=executor)
        return self.subscriber.subscribe(path, callback=callback, flow_control=flow, scheduler=scheduler)

    def problems(self) -> list[str]:
        return [f"{stream.name}: {stream.problem}" for stream in self.streams.values() if stream.problem]

    def supervise(self) -> None:
        """Each loop turn: notice ended streams, reopen them when due, and raise
        `controller_degraded` once while any is down (resolved when all deliver again)."""
        for stream in list(self.streams.values()):
            stream.check()
        problems = self.problems()
        firing = self.alerts.is_firing("controller_degraded", None, STREAMS_CONDITION)
        if problems and not firing:
            self.alerts.raise_alert(
                "controller_degraded",
                "ERROR",
                f"controller {self.holder_id} is not receiving messages: {'; '.join(problems)}",
                details={"streams": problems},
                condition=STREAMS_CONDITION,
            )
        elif firing and not problems and self.streams:
            self.alerts.resolve(
                "controller_degraded",
                None,
                f"controller {self.holder_id} receives from every subscription again",
                condition=STREAMS_CONDITION,
            )

    def close(self, *which: str, timeout: float = 10.0) -> bool:
        """Stop pulling and let in-flight callbacks finish, all within `timeout` seconds in total
        (not per stream); True when every stream drained in that time."""
        deadline = time.monotonic() + timeout
        names = [name for name in (which or tuple(self.streams)) if name in self.streams]
        for name in names:
            self.streams[name].cancel()  # stop pulling; in-flight callbacks run to completion
        drained = True
        for name in names:
            try:
                self.streams.pop(name).result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                drained = False
            except Exception:
                pass  # a stream that ended with an error has nothing left to drain
        return drained
