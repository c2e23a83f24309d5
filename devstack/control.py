"""Fault injection over HTTP, so a CLI or a test in another process can disturb a running
devstack (RELAUNCH_DEVSTACK_CONTROL names the server).

    POST /preempt   {"job": NAME, "grace_seconds": 15, "end_job": false, "code": 8 | "ABORTED",
                     "message": TEXT} -> {"preempted": true}   (code, message: the FAILED error)
    POST /restart   {"job": NAME, "grace_seconds": 15} -> {"restarted": true}  (in place, the same job)
    POST /oom       {"job": NAME, "replica": "workerpool0-0"} -> {"killed": true}
    POST /stockout  {"queue_seconds": 0, "fail": false, "region": R}
    POST /capacity  {"replicas": 2 | null, "machineType": "a2-highgpu-1g" | null, "mode": "queue" | "fail",
                     "region": R}
    POST /reclaim_rate {"per_hour": 2.0, "seed": null, "region": R}  (0 stops)
    POST /faults    {"rate": 0.2, "codes": ["UNAVAILABLE"], "seed": null}
    POST /quota     {"enabled": true, "creates_per_minute": 60, "other_per_minute": 600}
    POST /quota_shortfall {"mode": "queue" | "reject" | null, "region": R}
    POST /lose_create_replies {"count": 1}
    POST /behaviour {"knob": value, ...}  (devstack.vertex.behaviour; unknown knobs: 400)
    POST /gcs       {"outage": true} and/or {"bucket": NAME, "status": 403 | null}
    POST /simulate  {"enabled": true, "run_seconds": 30 | null, "exit_code": 0}  (simulated replicas)
    POST /seed_finished {"custom_jobs": [CustomJob JSON, ..], "state": "JOB_STATE_SUCCEEDED",
                     "run_seconds": 60} -> {"names": [..]}
    POST /calls     {"reset": true} -> the counts below, then starts them again
    GET  /calls     -> {"vertex": {"ListCustomJobs": n, ..}, "gcs": {"GET list": n, ..}}
    GET  /status    -> {"pid": .., "dir": .., "env": {..}, "jobs": [{name, state, ..}]}

"region" (optional) picks one region of a devstack with several (default: its first); a job's
region is read from its name. Errors come back as {"error": message} with 400 (bad input) or 404 (unknown job).

It also holds the run files through which `relaunch devstack` finds a background devstack.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
from google.rpc import code_pb2

log = logging.getLogger(__name__)


def _required(body: dict, key: str):
    if key not in body:
        raise ValueError(f"missing field {key!r}")
    return body[key]


def error_code(value) -> int | None:
    """A google.rpc code given as a number or a name ("ABORTED"), or None."""
    if value is None:
        return None
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        try:
            return code_pb2.Code.Value(value.strip().upper())
        except ValueError:
            raise ValueError(f"code {value!r} is not a google.rpc code name") from None
    if isinstance(value, bool):
        raise ValueError("code must be a number or a google.rpc code name")
    number = int(value)
    if number not in code_pb2.Code.values():
        raise ValueError(f"code {number} is not a google.rpc code (0-16)")
    return number


def _preempt(target, body):
    job = _required(body, "job")
    grace = body.get("grace_seconds")
    end_job = body.get("end_job")
    message = body.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError("message must be a string")
    return {
        "preempted": target.preempt(
            job,
            None if grace is None else float(grace),
            end_job=None if end_job is None else bool(end_job),
            error_code=error_code(body.get("code")),
            error_text=message,
        )
    }


def _restart(target, body):
    grace = body.get("grace_seconds")
    job = _required(body, "job")
    return {"restarted": target.restart_in_place(job, None if grace is None else float(grace))}


def _oom(target, body):
    return {"killed": target.out_of_memory(_required(body, "job"), str(body.get("replica", "workerpool0-0")))}


def _quota_shortfall(target, body):
    target.quota_shortfall(body.get("mode"), region=body.get("region"))
    return {}


def _lose_create_replies(target, body):
    target.lose_create_replies(int(body.get("count", 1)))
    return {}


def _behaviour(target, body):
    target.configure(**body)
    return {}


def _stockout(target, body):
    target.stockout(
        float(body.get("queue_seconds", 0.0)), bool(body.get("fail", False)), region=body.get("region")
    )
    return {}


def _reclaim_rate(target, body):
    seed = body.get("seed")
    target.reclaim_rate(
        float(_required(body, "per_hour")), None if seed is None else int(seed), region=body.get("region")
    )
    return {}


def _capacity(target, body):
    replicas = _required(body, "replicas")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int)):
        raise ValueError("replicas must be an integer or null")
    target.capacity(
        replicas, body.get("machineType"), str(body.get("mode", "queue")), region=body.get("region")
    )
    return {}


def _faults(target, body):
    seed = body.get("seed")
    target.faults(
        float(_required(body, "rate")), list(body.get("codes") or []), None if seed is None else int(seed)
    )
    return {}


def _quota(target, body):
    target.quota(
        bool(_required(body, "enabled")),
        int(body.get("creates_per_minute", 60)),
        int(body.get("other_per_minute", 600)),
    )
    return {}


def _gcs(target, body):
    target.gcs_faults(outage=body.get("outage"), bucket=body.get("bucket"), status=body.get("status"))
    return {}


def _simulate(target, body):
    run_seconds = body.get("run_seconds")
    target.simulate(
        bool(body.get("enabled", True)),
        None if run_seconds is None else float(run_seconds),
        int(body.get("exit_code", 0)),
    )
    return {}


def _seed_finished(target, body):
    jobs = _required(body, "custom_jobs")
    if not isinstance(jobs, list):
        raise ValueError("custom_jobs must be a list of CustomJob objects")
    names = target.seed_finished(
        jobs, str(body.get("state", "JOB_STATE_SUCCEEDED")), float(body.get("run_seconds", 60.0))
    )
    return {"names": names}


def _calls(target, body):
    return target.calls(reset=bool(body.get("reset", False)))


_POSTS = {
    "/simulate": _simulate,
    "/seed_finished": _seed_finished,
    "/calls": _calls,
    "/gcs": _gcs,
    "/preempt": _preempt,
    "/restart": _restart,
    "/oom": _oom,
    "/stockout": _stockout,
    "/capacity": _capacity,
    "/reclaim_rate": _reclaim_rate,
    "/faults": _faults,
    "/quota": _quota,
    "/quota_shortfall": _quota_shortfall,
    "/lose_create_replies": _lose_create_replies,
    "/behaviour": _behaviour,
}


class _Handler(BaseHTTPRequestHandler):
    target: Any  # the DevStack, set on the subclass made per server

    def _reply(self, status: HTTPStatus, payload: dict) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.rstrip("/") == "/status":
            return self._reply(HTTPStatus.OK, self.target.status())
        if self.path.rstrip("/") == "/calls":
            return self._reply(HTTPStatus.OK, self.target.calls())
        self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        action = _POSTS.get(self.path.rstrip("/"))
        if action is None:
            return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            self._reply(HTTPStatus.OK, action(self.target, body))
        except KeyError as err:  # the only KeyError the stand-ins raise: an unknown job
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"unknown job {err.args[0]}"})
        except (ValueError, TypeError) as err:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(err)})

    def log_message(self, format, *args):
        log.debug(format, *args)


class ControlServer:
    def __init__(self, target, host: str = "127.0.0.1", port: int = 0):
        handler = type("ControlHandler", (_Handler,), {"target": target})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="devstack-control", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class ControlError(RuntimeError):
    """The control server refused a request (unknown job, bad value)."""


class ControlClient:
    """The DevStack's fault-injection methods, over HTTP."""

    def __init__(self, url: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        reply = requests.request(method, self.url + path, json=body, timeout=self.timeout)
        payload = reply.json()
        if reply.status_code != 200:
            raise ControlError(payload.get("error") or f"HTTP {reply.status_code}")
        return payload

    def preempt(
        self,
        job_name: str,
        grace_seconds: float | None = None,
        *,
        end_job: bool | None = None,
        code: int | str | None = None,
        message: str | None = None,
    ) -> bool:
        body = {
            "job": job_name,
            "grace_seconds": grace_seconds,
            "end_job": end_job,
            "code": code,
            "message": message,
        }
        return self._call("POST", "/preempt", body)["preempted"]

    def restart_in_place(self, job_name: str, grace_seconds: float | None = None) -> bool:
        body = {"job": job_name, "grace_seconds": grace_seconds}
        return self._call("POST", "/restart", body)["restarted"]

    def out_of_memory(self, job_name: str, replica: str = "workerpool0-0") -> bool:
        return self._call("POST", "/oom", {"job": job_name, "replica": replica})["killed"]

    def quota_shortfall(self, mode: str | None, region: str | None = None) -> None:
        self._call("POST", "/quota_shortfall", {"mode": mode, "region": region})

    def lose_create_replies(self, count: int = 1) -> None:
        self._call("POST", "/lose_create_replies", {"count": count})

    def configure(self, **changes) -> None:
        self._call("POST", "/behaviour", changes)

    def stockout(self, queue_seconds: float = 0.0, fail: bool = False, region: str | None = None) -> None:
        self._call("POST", "/stockout", {"queue_seconds": queue_seconds, "fail": fail, "region": region})

    def capacity(
        self,
        replicas: int | None,
        machine_type: str | None = None,
        mode: str = "queue",
        region: str | None = None,
    ) -> None:
        body = {"replicas": replicas, "machineType": machine_type, "mode": mode, "region": region}
        self._call("POST", "/capacity", body)

    def reclaim_rate(self, per_hour: float, seed: int | None = None, region: str | None = None) -> None:
        self._call("POST", "/reclaim_rate", {"per_hour": per_hour, "seed": seed, "region": region})

    def faults(self, rate: float, codes: list[str] = (), seed: int | None = None) -> None:
        self._call("POST", "/faults", {"rate": rate, "codes": list(codes), "seed": seed})

    def quota(self, enabled: bool, creates_per_minute: int = 60, other_per_minute: int = 600) -> None:
        self._call(
            "POST",
            "/quota",
            {
                "enabled": enabled,
                "creates_per_minute": creates_per_minute,
                "other_per_minute": other_per_minute,
            },
        )

    def simulate(self, enabled: bool = True, run_seconds: float | None = None, exit_code: int = 0) -> None:
        self._call(
            "POST", "/simulate", {"enabled": enabled, "run_seconds": run_seconds, "exit_code": exit_code}
        )

    def seed_finished(
        self, custom_jobs: list[dict], state: str = "JOB_STATE_SUCCEEDED", run_seconds: float = 60.0
    ) -> list[str]:
        body = {"custom_jobs": custom_jobs, "state": state, "run_seconds": run_seconds}
        return self._call("POST", "/seed_finished", body)["names"]

    def calls(self, reset: bool = False) -> dict:
        return self._call("POST", "/calls", {"reset": reset}) if reset else self._call("GET", "/calls")

    def status(self) -> dict:
        return self._call("GET", "/status")


# ---- run files: how other processes find a devstack that `python -m devstack` runs -------

ENV_FILE = "env.json"  # {"pid": N, "env": {...}}, written once every stand-in is up
PID_FILE = "devstack.pid"
LOG_FILE = "devstack.log"


def write_run_file(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # readers see the whole file or none


def read_run_env(dir: str | os.PathLike) -> tuple[int, dict[str, str]] | None:
    try:
        data = json.loads((Path(dir) / ENV_FILE).read_text())
        return int(data["pid"]), dict(data["env"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_run_pid(dir: str | os.PathLike) -> int | None:
    try:
        return int((Path(dir) / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def devstack_alive(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) `python -m devstack` process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X") and b"devstack" in cmdline


def export_lines(env: dict[str, str]) -> str:
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())
