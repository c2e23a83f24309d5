"""`relaunch demo`: the whole story on one machine, in a few minutes.

devstack (Pub/Sub, GCS, Vertex stand-ins) + the controller as a real process + the trainer's
built-in GPT example as a 2-node x 2-process Spot job. The demo publishes `examples/demo.yaml` and
reclaims the job twice mid-training, the two ways Vertex may answer a Spot reclaim: first Vertex
restarts it in place (the trainer resumes from the emergency checkpoint the attempt itself
wrote), then it fails it, and the controller resubmits from the latest committed checkpoint.
Finally it runs the same request once more without any preemption, to show the two runs end with
exactly the same loss.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from controller.cli.demo_progress import ChiefLog, Narrator, describe
from controller.core.model import TERMINAL_PHASE_NAMES

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"


class DemoFailed(Exception):
    pass


@dataclass
class DemoOptions:
    request_file: Path = EXAMPLE
    steps: int | None = None  # override the example's --steps (tests use fewer)
    workdir: Path | None = None
    keep: bool = False
    timeout: float = 600.0
    preempt_after_checkpoints: int = 2
    regions: tuple[str, ...] = ()  # further Vertex regions, each its own stand-in (devstack.stack)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _load_request(options: DemoOptions, job_id: str, checkpoint_uri: str) -> dict:
    request = yaml.safe_load(options.request_file.read_text())
    request["jobId"] = job_id
    request["checkpoint"] = {"uri": checkpoint_uri}
    if options.steps is not None:
        for pool in request["jobSpec"]["workerPoolSpecs"]:
            args = pool.get("containerSpec", {}).get("args", [])
            if "--steps" in args:
                args[args.index("--steps") + 1] = str(options.steps)
    return request


class Demo:
    def __init__(self, options: DemoOptions, narrator: Narrator | None = None):
        self.options = options
        self.narrator = narrator or Narrator()
        self.say = self.narrator.say
        self.readiness = "no answer on /readyz yet (the process is importing its modules)"
        self.trainer_said = "nothing yet (its replicas are starting)"  # the newest progress line
        self.dir = Path(options.workdir or tempfile.mkdtemp(prefix="relaunch-demo-"))
        self.stack = None
        self.controller: subprocess.Popen | None = None
        self.port = _free_port()

    # --- setting up -------------------------------------------------------------------------
    def start(self) -> None:
        self.say(f"starting devstack (Pub/Sub, Cloud Storage, Vertex AI stand-ins) in {self.dir}")
        self.narrator.waiting_for("devstack starting (loading the Google client libraries)")
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        from devstack.stack import DevStack

        self.stack = DevStack(str(self.dir / "devstack"), regions=self.options.regions).start(
            progress=lambda text: self.say(f"  devstack: {text}")
        )
        # Relaunch renders `disableRetries: true`; whether that also stops Vertex's in-place
        # restarts after a Spot reclaim is undocumented (devstack/README.md). The demo takes the
        # answer "it does not", so that both outcomes of a reclaim are shown.
        self.stack.configure(disable_retries_stops_reclaim_restarts=False)
        self.env = self.stack.env()
        os.environ.update(self.env)
        storage.Client(
            project=self.env["GOOGLE_CLOUD_PROJECT"], credentials=AnonymousCredentials()
        ).create_bucket("relaunch-demo")
        self.say("starting the controller (relaunch controller)")
        controller_env = {
            **os.environ,
            **self.env,
            "PORT": str(self.port),
            "RELAUNCH_CREATE_SUBSCRIPTIONS": "true",
            "RELAUNCH_STATE_STORE": f"sqlite:///{self.dir}/controller-state.db",
            "RELAUNCH_RECONCILE_SECONDS": "5",
        }
        self.controller_log = open(self.dir / "controller.log", "ab")
        self.controller = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "controller"],
            env=controller_env,
            stdout=self.controller_log,
            stderr=subprocess.STDOUT,
        )
        self.narrator.waiting_for(lambda: f"waiting for the controller: {self.readiness}")
        self._wait(lambda: self._ready(), 60, "the controller to become ready")
        self.narrator.waiting_for(None)
        self.say(f"controller ready: http://127.0.0.1:{self.port}/v1/jobs")

    def _ready(self) -> bool:
        if self.controller.poll() is not None:
            raise DemoFailed(
                f"the controller exited with {self.controller.returncode}; see {self.dir / 'controller.log'}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                self.readiness = r.read().decode()
                return r.status == 200 and "leader" in self.readiness
        except urllib.error.HTTPError as error:  # 503 with the reason it is not ready yet
            self.readiness = error.read().decode(errors="replace").strip()
            return False
        except OSError:
            return False

    def _job(self, job_id: str) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/jobs/{job_id}", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def _wait(self, check, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.25)  # polling other processes (HTTP, GCS): nothing to block on
        raise DemoFailed(f"timed out after {timeout:.0f}s waiting for {what}")

    # --- the story --------------------------------------------------------------------------
    def publish(self, request: dict) -> None:
        from controller.adapters.pubsub import publish_request
        from controller.request import parse_request
        from controller.settings import Settings

        parse_request(request)  # the demo's own request must be valid: fail loudly if not
        settings = Settings()  # this process's environment points at the demo's devstack
        publish_request(settings, json.dumps(request).encode())
        self.say(
            f"published job request {request['jobId']!r} to {settings.topic_path(settings.requests_topic)}"
        )

    def follow(self, job_id: str, *, preempt: bool) -> dict:
        """Print the job's timeline as it grows. With `preempt`, reclaim attempt 1 twice, the two
        ways Vertex may answer a Spot reclaim: first it restarts the job in place (same attempt,
        same environment: the trainer resumes from the checkpoint this attempt itself wrote),
        then, restarts used up, it fails the job, and Relaunch submits attempt 2."""
        from trainer import storage

        shown = 0
        reclaims: list[int] = []  # the newest committed step at each reclaim
        checkpoint_uri = None
        logs: dict[str, ChiefLog] = {}  # the chief replica's log of each CustomJob
        self.trainer_said = "nothing yet (its replicas are starting)"
        latest: dict = {}
        self.narrator.waiting_for(
            lambda: f"job {job_id}: {_waiting_line(latest.get('doc'))}; trainer: {self.trainer_said}"
        )

        def step() -> dict | None:
            nonlocal shown, checkpoint_uri
            doc = self._job(job_id)
            if doc is None:
                return None
            latest["doc"] = doc
            checkpoint_uri = doc["checkpointUri"]
            for entry in doc.get("timeline", [])[shown:]:
                self.say(f"  {job_id}: {entry['what']}")
            shown = len(doc.get("timeline", []))
            self._trainer_progress(job_id, doc, logs)
            if preempt and len(reclaims) < 2 and doc["phase"] == "running" and doc["attempt"] == 1:
                steps = storage.list_committed_steps(checkpoint_uri)
                name = doc["attempts"][-1]["vertexJob"]
                if not reclaims and len(steps) >= self.options.preempt_after_checkpoints:
                    self.say(
                        f"SPOT RECLAIM 1: preempting {name} (checkpoints committed at steps {steps}); "
                        "replicas get SIGTERM and 20 s to save, then Vertex restarts the job in place"
                    )
                    self.stack.preempt(name, grace_seconds=20, end_job=False)
                    reclaims.append(steps[-1])
                elif len(reclaims) == 1 and steps and steps[-1] > _emergency_step(checkpoint_uri):
                    # A commit after the emergency save: the restarted gang is training again.
                    self.say(
                        f"  {job_id}: attempt 1, restarted in place, resumed from the emergency checkpoint "
                        f"it wrote (step {_emergency_step(checkpoint_uri)}) and committed step {steps[-1]}"
                    )
                    self.say(
                        f"SPOT RECLAIM 2: preempting {name} again; no restarts left, so the job fails "
                        "and Relaunch must resubmit"
                    )
                    self.stack.preempt(name, grace_seconds=20, end_job=True)
                    reclaims.append(steps[-1])
            return doc if doc["phase"] in TERMINAL_PHASE_NAMES else None

        doc = self._wait(step, self.options.timeout, f"job {job_id} to finish")
        self.narrator.waiting_for(None)
        if preempt and len(reclaims) < 2:
            raise DemoFailed("the job finished before it could be preempted twice; use more --steps")
        return doc

    def _trainer_progress(self, job_id: str, doc: dict, logs: dict[str, ChiefLog]) -> None:
        """The trainer's own progress lines from the chief replica's log of each attempt."""
        steps = self.options.steps or _steps_of(self.options.request_file)
        for attempt in doc["attempts"]:
            name = attempt.get("vertexJob")
            if not name:
                continue
            if name not in logs:
                vertex_id = name.rsplit("/", 1)[1]
                logs[name] = ChiefLog(self.dir / "devstack" / "vertex" / vertex_id / "workerpool0-0.log")
            for record in logs[name].new_records():
                line = describe(record, steps)
                if line is not None:
                    self.say(f"  {job_id} attempt {attempt['number']}: {line}")
                    self.trainer_said = line

    def final_loss(self, doc: dict) -> tuple[str, str]:
        """(final loss, parameter hash) the chief logged at the end of the last attempt."""
        vertex_id = doc["attempts"][-1]["vertexJob"].rsplit("/", 1)[1]
        log_path = self.dir / "devstack" / "vertex" / vertex_id / "workerpool0-0.log"
        for line in reversed(log_path.read_text(errors="replace").splitlines()):
            if '"final_loss"' in line:
                record = json.loads(line)
                return record["final_loss"], record.get("params_sha256", "")
        raise DemoFailed(f"no final loss in {log_path}")

    def stop(self) -> None:
        """Stop what the demo started, saying what each step waits for (the heartbeat repeats it)."""
        say, waiting = self.narrator.say, self.narrator.waiting_for
        if self.controller is not None and self.controller.poll() is None:
            waiting(
                "cleaning up: the controller to finish its pass and exit (SIGTERM sent; killed after 30s)"
            )
            self.controller.send_signal(signal.SIGTERM)
            try:
                self.controller.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.controller.kill()
            say(f"controller stopped (exit {self.controller.wait()})")
        if self.stack is not None:
            waiting("cleaning up: devstack to stop its replica processes and its servers")
            self.stack.stop()
            say("devstack stopped")
        if not self.options.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def _steps_of(request_file: Path) -> int | None:
    """The --steps of the request's chief container, for "step 40/200" lines."""
    try:
        args = yaml.safe_load(request_file.read_text())["jobSpec"]["workerPoolSpecs"][0]["containerSpec"][
            "args"
        ]
        return int(args[args.index("--steps") + 1])
    except (OSError, KeyError, IndexError, TypeError, ValueError):
        return None


def _waiting_line(doc: dict | None) -> str:
    if doc is None:
        return "waiting for the controller to accept the request"
    if doc["phase"] == "backing_off" and doc.get("nextAttemptAt"):
        return f"backing off, next attempt in {max(doc['nextAttemptAt'] - time.time(), 0):.0f}s"
    return f"{doc['phase']}, attempt {doc['attempt']}, newest checkpoint step {doc['latestCheckpointStep']}"


def _emergency_step(uri: str) -> float:
    """The step attempt 1's emergency save committed on SIGTERM; infinity until it has."""
    from trainer import storage

    record = storage.read_exit_record(uri, 1)
    if record is None or record.reason != "preempted" or not record.checkpoint_saved:
        return float("inf")
    return record.last_committed_step if record.last_committed_step is not None else float("inf")


def _exit_records(uri: str, attempts: list[dict]) -> dict[int, object]:
    from trainer import storage

    return {a["number"]: storage.read_exit_record(uri, a["number"]) for a in attempts}


def summarize(doc: dict, exits: dict[int, object]) -> list[str]:
    lines = [
        f"job {doc['jobId']}: {doc['phase']} after {doc['attempt']} attempt(s), "
        f"{doc['preemptions']} preemption(s), {doc['failures']} failure(s)"
    ]
    for attempt in doc["attempts"]:
        record = exits.get(attempt["number"])
        start = (
            f"resumed from step {attempt['resumeFromStep']}"
            if attempt["resumeFromStep"] is not None
            else "started from scratch"
        )
        ended = f"ended {attempt['ending']} ({attempt['rule']})"
        lost = ""
        if record is not None and record.reason == "preempted":
            saved = record.last_committed_step
            lost = (
                f"; SIGTERM at step {record.step}, emergency checkpoint "
                f"{'committed' if record.checkpoint_saved else 'NOT saved'}, "
                f"{(record.step or 0) - (saved or 0)} step(s) to recompute"
            )
        lines.append(f"  attempt {attempt['number']}: {start}, {ended}{lost}")
    return lines


def run(options: DemoOptions) -> int:
    narrator = Narrator()
    say = narrator.say
    started = time.monotonic()
    demo = Demo(options, narrator)
    saved_env = dict(os.environ)  # the demo points this process's clients at its devstack
    try:
        demo.start()
        main = _load_request(options, "demo-gpt", "gs://relaunch-demo/checkpoints/demo-gpt")
        demo.publish(main)
        doc = demo.follow("demo-gpt", preempt=True)
        if doc["phase"] != "succeeded":
            raise DemoFailed(f"demo-gpt ended {doc['phase']}: {doc['terminalReason']}")
        loss, params = demo.final_loss(doc)

        say("now the same request without any preemption, for comparison")
        reference = _load_request(
            options, "demo-gpt-reference", "gs://relaunch-demo/checkpoints/demo-gpt-reference"
        )
        demo.publish(reference)
        ref_doc = demo.follow("demo-gpt-reference", preempt=False)
        if ref_doc["phase"] != "succeeded":
            raise DemoFailed(f"the reference run ended {ref_doc['phase']}: {ref_doc['terminalReason']}")
        ref_loss, ref_params = demo.final_loss(ref_doc)

        print()
        for line in summarize(doc, _exit_records(doc["checkpointUri"], doc["attempts"])):
            print(line)
        print(f"final loss, preempted and resumed: {loss}  (parameters sha256 {params[:16]})")
        print(f"final loss, never preempted:       {ref_loss}  (parameters sha256 {ref_params[:16]})")
        same = loss == ref_loss and params == ref_params
        print(
            "identical: the resumed run ended exactly where an uninterrupted run ends"
            if same
            else "MISMATCH: the resumed run diverged from the uninterrupted run"
        )
        print(f"demo wall time: {time.monotonic() - started:.0f}s")
        return 0 if same and doc["preemptions"] >= 1 else 1
    except DemoFailed as error:
        print(f"relaunch demo: failed: {error}", file=sys.stderr)
        if options.keep or options.workdir:
            print(f"logs kept in {demo.dir}", file=sys.stderr)
        return 1
    finally:
        narrator.waiting_for("cleaning up")
        say("cleaning up (controller, devstack, replica processes)")
        demo.stop()
        # The interpreter's exit walks every object the Google clients loaded (half a CPU-second
        # here: 5-10 s without a line on a loaded machine). Collected now, while the heartbeat
        # still speaks, and frozen, the exit skips them; nothing is left for it to collect.
        gc.collect()
        narrator.stop()
        gc.freeze()
        say("cleaned up; exiting")
        os.environ.clear()
        os.environ.update(saved_env)
