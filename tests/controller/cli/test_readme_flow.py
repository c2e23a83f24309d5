"""The README's manual local flow, word for word: the lines between the `manual-flow` markers
run as one bash script (errexit, as a person's shell stops being useful at the first failure),
in a fresh environment whose PATH has only the system's folders, in a checkout that holds the
shipped examples/ and the project's .venv (both linked, not copied or changed). The real
`relaunch` console script starts a detached devstack, a controller in the background and the
real trainer on CPU. The job must be accepted, preempted after its first checkpoint and well
before its last step, resumed and succeed; and the same script run a second time in the same
checkout must tell the same story.

Only what isolates the test from the machine differs from a person's shell: the CLI's config
and state directories are the test's own, and the controller's HTTP port is a free one (the
README's 8080 may be taken on a shared machine).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import free_port

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(sys.prefix)
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
DEMO_STEPS = 200  # examples/demo.yaml's --steps


def manual_flow() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = re.search(
        r"<!-- manual-flow:start -->\n```bash\n(.*?)```\n<!-- manual-flow:end -->", readme, re.S
    )
    assert block, "README.md has no manual-flow block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_manual_flow_has_what_a_user_needs():
    lines = manual_flow()
    assert lines[0].startswith(". .venv/bin/activate")
    assert lines[1].startswith('eval "$(relaunch devstack up --fresh)"')
    assert any(line.startswith("relaunch devstack preempt ") for line in lines)
    assert lines[-1].startswith('eval "$(relaunch devstack down)"')


def _checkout(tmp_path: Path) -> Path:
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    (work / ".venv").symlink_to(VENV)
    return work


def _fresh_env(tmp_path: Path, port: int) -> dict[str, str]:
    """What a new login shell has: no venv on PATH, no emulator or Relaunch variables."""
    return {
        "HOME": str(tmp_path / "home"),
        "PATH": SYSTEM_PATH,
        "LANG": "C.UTF-8",
        "RELAUNCH_CONFIG_DIR": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "PORT": str(port),
    }


def _run_flow(work: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = "\n".join(
        [
            # Whatever happens, leave no devstack or controller behind.
            "trap 'kill $(jobs -p) 2>/dev/null || true; "
            f"{VENV / 'bin' / 'relaunch'} devstack down >/dev/null 2>&1 || true' EXIT",
            *(f"echo '+ {line.split('#')[0].strip()}'\n{line}" for line in manual_flow()),
        ]
    )
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )


def _check_story(done: subprocess.CompletedProcess, work: Path) -> None:
    log = work / "controller.log"
    controller_log = log.read_text() if log.exists() else ""
    assert done.returncode == 0, (
        f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}\ncontroller:\n{controller_log[-4000:]}"
    )
    out = done.stdout
    assert json.loads(controller_log.splitlines()[0])["severity"]  # JSON from its first line on
    assert "accepted demo-gpt" in out
    assert f"demo-gpt: succeeded, attempt 2, checkpoint step {DEMO_STEPS}" in out
    status = out[out.index("+ relaunch status demo-gpt") : out.index("+ relaunch logs")]
    rows = {line.split()[0]: line for line in status.splitlines() if re.match(r"^[12]\s", line)}
    assert "preempted (" in rows["1"] and "succeeded (" in rows["2"], status
    assert "controller:  running, last seen" in status  # its heartbeat, in the state store
    assert max(len(line) for line in status.splitlines()) <= 100, status
    # The reclaim landed inside training: attempt 2 resumed well before the last step.
    resumed = int(re.search(r"succeeded \([^)]*\)\s+(\d+)", rows["2"]).group(1))
    assert 0 < resumed < DEMO_STEPS * 3 // 4, status
    logs = out[out.index("+ relaunch logs demo-gpt --attempt 2") : out.index("+ kill %1")]
    assert "resum" in logs.lower(), logs  # the trainer says it resumed from the checkpoint
    # `down` unset what `up` exported, and removed the CLI's layer; the job's record stays.
    assert not (work / ".devstack" / "cli-layer.json").exists()
    assert (work / ".devstack" / "controller-state.db").exists()


@pytest.mark.slow
def test_readme_manual_flow_runs_word_for_word_twice_in_one_checkout(tmp_path):
    work = _checkout(tmp_path)
    env = _fresh_env(tmp_path, free_port())
    _check_story(_run_flow(work, env), work)
    # Again, in the same checkout: the first line starts over, so the story is the same.
    _check_story(_run_flow(work, env), work)


def test_without_the_venv_the_flow_stops_at_once_with_a_failure(tmp_path):
    work = tmp_path / "checkout"
    (work / "examples").mkdir(parents=True)
    done = _run_flow(work, _fresh_env(tmp_path, free_port()))
    assert done.returncode != 0
    assert "+ relaunch submit" not in done.stdout  # nothing after the first line ran
