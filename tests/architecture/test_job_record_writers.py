"""Only the reconcile writes a job's record (`jobs/{job_id}`): read statically, every store write
whose key is `job_key(...)` sits in the reconciler (and its ledger-mark step); the intake creates
the record once (create-only: the recorded request), retention deletes finished ones."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "controller"
WRITES = {"put", "create", "delete"}
ALLOWED = {
    ("service/reconciler.py", "put"),
    ("service/reconcile_ledger.py", "put"),
    ("service/intake.py", "create"),
}


def job_record_writes() -> set[tuple[str, str]]:
    found = set()
    for path in ROOT.rglob("*.py"):
        if "store" in path.relative_to(ROOT).parts[:1]:
            continue  # the stores themselves
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in WRITES or not node.args:
                continue
            key = node.args[0]
            if (
                isinstance(key, ast.Call)
                and getattr(key.func, "id", getattr(key.func, "attr", "")) == "job_key"
            ):
                found.add((path.relative_to(ROOT).as_posix(), node.func.attr))
    return found


def test_only_the_reconcile_writes_a_job_record():
    writes = job_record_writes()
    assert writes - ALLOWED == set(), "a job's record written outside the reconcile"
    # The reconcile's own writes are found (the scan sees what it looks for).
    assert ("service/reconciler.py", "put") in writes
