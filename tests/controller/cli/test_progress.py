"""How `submit --wait` and `wait` show progress: a live line on a terminal, plain lines in a pipe;
and `wait` on a job that does not exist answers at once."""

from __future__ import annotations

import io

from controller.cli.main import main
from controller.cli.progress import Progress
from controller.store.sqlite import SqliteStateStore


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def status(phase: str, attempt: int, step: int | None, job_id: str = "demo") -> dict:
    return {"jobId": job_id, "phase": phase, "attempt": attempt, "latestCheckpointStep": step}


def test_a_terminal_gets_one_line_per_attempt_rewritten_in_place():
    screen = Terminal()
    progress = Progress(screen)
    progress(status("running", 1, None))
    progress(status("running", 1, 20))
    progress(status("running", 2, 20))
    progress.done()
    text = screen.getvalue()
    assert text.count("\r\x1b[K") == 3
    # Attempt 1's last state stays on screen; attempt 2 gets a line of its own.
    lines = text.split("\n")
    assert len(lines) == 3 and lines[2] == ""
    assert "demo: running, attempt 1, checkpoint step 20" in lines[0].rsplit("\r\x1b[K", 1)[-1]
    assert "attempt 2" in lines[1]


def test_a_pipe_gets_plain_lines_without_control_sequences():
    piped = io.StringIO()
    progress = Progress(piped)
    progress(status("running", 1, None, job_id="evil\x1b[2J"))
    progress(status("succeeded", 1, 40))
    progress.done()
    lines = piped.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in piped.getvalue() and "\r" not in piped.getvalue()
    assert lines[0].endswith("UTC  evil\\x1b[2J: running, attempt 1, no checkpoint yet")
    assert lines[1].endswith("demo: succeeded, attempt 1, checkpoint step 40")


def test_wait_for_an_unknown_job_exits_1_at_once(tmp_path, monkeypatch, capsys):
    SqliteStateStore(tmp_path / "state.db")  # an existing, empty store
    monkeypatch.setenv("RELAUNCH_STATE_STORE", f"sqlite:///{tmp_path / 'state.db'}")
    # A wait that did not answer at once would take verdict_seconds, then exit 1 as well.
    monkeypatch.setenv("RELAUNCH_VERDICT_SECONDS", "600")
    assert main(["wait", "nope", "--timeout", "300"]) == 1
    assert "no job 'nope'" in capsys.readouterr().err
