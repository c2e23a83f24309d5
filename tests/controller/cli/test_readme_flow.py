"""The README's manual local flow, word for word: the lines between the `manual-flow` markers
run in one bash script, in a fresh directory, with the real `relaunch` console script, a
detached devstack, a controller in the background and the real trainer on CPU. The job must
be accepted, preempted after its first checkpoint, resumed and succeed.

Only two things differ from a person's shell: the CLI's config and state directories are the
test's own, and examples/demo.yaml is a copy with more steps (400, so the preemption lands mid-training) (the words of the commands are
unchanged), so the test takes one to two minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import free_port

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
# Variables the session's own devstack fixture may have put in os.environ: the flow makes its own.
DEVSTACK_VARIABLES = (
    "PUBSUB_EMULATOR_HOST",
    "STORAGE_EMULATOR_HOST",
    "RELAUNCH_VERTEX_ENDPOINT",
    "RELAUNCH_DEVSTACK_CONTROL",
    "GOOGLE_CLOUD_PROJECT",
    "RELAUNCH_STATE_STORE",
)


def manual_flow() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = re.search(
        r"<!-- manual-flow:start -->\n```bash\n(.*?)```\n<!-- manual-flow:end -->", readme, re.S
    )
    assert block, "README.md has no manual-flow block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_manual_flow_has_what_a_user_needs():
    lines = manual_flow()
    assert lines[0].startswith('eval "$(relaunch devstack up)"')
    assert any(line.startswith("relaunch devstack preempt ") for line in lines)
    assert lines[-1].startswith("relaunch devstack down")


@pytest.mark.slow
def test_readme_manual_flow_survives_a_preemption(tmp_path):
    work = tmp_path / "checkout"
    (work / "examples").mkdir(parents=True)
    demo = (ROOT / "examples" / "demo.yaml").read_text()
    assert '--steps, "200"' in demo
    # Enough steps that the preemption lands mid-training even when the controller first sees a
    # checkpoint one reconcile period (5 s on an emulator) after it was committed.
    (work / "examples" / "demo.yaml").write_text(demo.replace('--steps, "200"', '--steps, "400"'))

    env = {key: value for key, value in os.environ.items() if key not in DEVSTACK_VARIABLES}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT),
        RELAUNCH_CONFIG_DIR=str(tmp_path / "config"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        PORT=str(free_port()),  # the README's 8080 may be taken on a shared machine
    )
    env.pop("RELAUNCH_RECONCILE_SECONDS", None)  # the flow must work with the defaults
    script = "\n".join(
        [
            "set -euo pipefail",
            # Whatever happens, leave no devstack or controller behind.
            "trap 'kill $(jobs -p) 2>/dev/null || true; relaunch devstack down >/dev/null 2>&1 || true' EXIT",
            *(f"echo '+ {line.split('#')[0].strip()}'\n{line}" for line in manual_flow()),
        ]
    )
    done = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=480
    )
    controller_log = (work / "controller.log").read_text() if (work / "controller.log").exists() else ""
    assert done.returncode == 0, (
        f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}\ncontroller:\n{controller_log[-4000:]}"
    )
    out = done.stdout
    assert "accepted demo-gpt" in out
    assert "demo-gpt: succeeded, attempt 2, checkpoint step 400" in out
    status = out[out.index("+ relaunch status demo-gpt") :]
    assert "preempted (" in status and "succeeded (" in status
    logs = out[out.index("+ relaunch logs demo-gpt --attempt 2") : out.index("+ kill %1")]
    assert "resum" in logs.lower(), logs  # the trainer says it resumed from the checkpoint

    # The CLI's config layer is gone with the devstack; the job's record stays in .devstack.
    assert not (tmp_path / "config" / "devstack.json").exists()
    assert (work / ".devstack" / "controller-state.db").exists()
