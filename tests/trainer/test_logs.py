"""Log lines of processes sharing one stdout (ranks of a node) never merge."""

import json
import subprocess
import sys

from tests.support.gang import REPO

_WRITER = """
import sys
from trainer import logs
rank = int(sys.argv[1])
log = logs.configure(verbose=True, rank=rank)
for i in range(400):
    log.info("train", step=i, payload="x" * (200 + 7 * rank))
"""


def test_concurrent_processes_never_merge_lines_and_every_line_names_its_rank(tmp_path):
    env = {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "RELAUNCH_JOB_ID": "j", "RELAUNCH_ATTEMPT": "2"}
    # All writers share one pipe, as the workers of a node share the container's stdout.
    shell = " & ".join(f"{sys.executable} -c '{_WRITER}' {rank}" for rank in range(4)) + " & wait"
    out = subprocess.run(
        ["bash", "-c", shell], env=env, cwd=REPO, stdout=subprocess.PIPE, timeout=120, check=True
    ).stdout.decode()
    lines = out.splitlines()
    records = [json.loads(line) for line in lines]  # fails on any merged or torn line
    assert len(records) == 4 * 400
    for rank in range(4):
        mine = [r for r in records if r["rank"] == rank]
        assert [r["step"] for r in mine] == list(range(400))
        assert all(r["payload"] == "x" * (200 + 7 * rank) for r in mine)
    assert all(r["severity"] == "INFO" and r["job_id"] == "j" and r["attempt"] == "2" for r in records)
