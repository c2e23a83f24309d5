"""Optional Slack-compatible webhook for alerts (`RELAUNCH_WEBHOOK_URL`).

`send(alert)` only enqueues: a background thread does the POSTs, so a slow or dead chat service
can never stall a decision. The queue is bounded; when it is full the newest alert is dropped and
counted (the alerts topic and the log line still carry it). Each POST has a timeout and is
retried with backoff on 5xx replies and connection errors; a 4xx is the webhook refusing the
message, so it is logged and not retried.
"""

from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from controller import logs

log = logs.get("relaunch.webhook")

_STOP = object()


def slack_text(alert: dict) -> str:
    """One plain line: severity, kind and state, job and attempt, summary."""
    job = alert.get("jobId") or "controller"
    attempt = alert.get("attempt")
    where = f"job {job}" + (f" attempt {attempt}" if attempt else "")
    state = "RESOLVED" if alert.get("state") == "resolved" else alert.get("severity", "WARNING")
    return f"[{state}] {alert.get('kind')}: {where}: {alert.get('summary')}"


def _retryable(error: BaseException) -> bool:
    if isinstance(error, urllib.error.HTTPError):
        return error.code >= 500
    return isinstance(error, (urllib.error.URLError, ConnectionError, TimeoutError))


class WebhookSink:
    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 10.0,
        queue_size: int = 100,
        attempts: int = 5,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ):
        self.url = url
        self.timeout = timeout_seconds
        self.dropped = 0
        self.delivered = 0
        self.failed = 0
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._retrying = Retrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=backoff_initial, max=backoff_max),
            reraise=True,
        )
        self._thread = threading.Thread(target=self._run, name="relaunch-webhook", daemon=True)
        self._thread.start()

    def send(self, alert: dict) -> None:
        """Queue one alert for delivery; never blocks."""
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.dropped += 1
            log.warning(
                "webhook queue full; alert dropped",
                alert_kind=alert.get("kind"),
                job_id=alert.get("jobId"),
                dropped=self.dropped,
            )

    def close(self, timeout: float = 5.0) -> None:
        """Stop after what is queued (bounded by `timeout`; the thread is a daemon anyway)."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            alert = self._queue.get()
            if alert is _STOP:
                return
            try:
                self._retrying(self._post, alert)
                self.delivered += 1
            except Exception as error:
                self.failed += 1
                log.error(
                    "webhook delivery failed",
                    error=str(error),
                    alert_kind=alert.get("kind"),
                    job_id=alert.get("jobId"),
                )

    def _post(self, alert: dict) -> None:
        body = json.dumps({"text": slack_text(alert)}).encode()
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as reply:
            reply.read()
