"""Issue 21's thread rule, read from the source: besides the queue's workers, only the stream
callbacks, the HTTP server and the lease renewer start threads (and the alert webhook's sender,
which touches no job). A new pool anywhere else in the controller (as the ending's evidence
once had) fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ALLOWED = {
    "controller/service/workqueue.py": "the queue's workers",
    "controller/service/subscriptions.py": "the Pub/Sub stream callbacks",
    "controller/service/http.py": "the HTTP server",
    "controller/adapters/lease.py": "the lease renewer",
    "controller/adapters/webhook.py": "the alert webhook's sender (posts alerts, no job state)",
}
STARTERS = {"Thread", "ThreadPoolExecutor", "Timer"}


def _starts_threads(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in STARTERS:
                return True
    return False


def test_only_the_named_modules_start_threads():
    found = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "controller").rglob("*.py")
        if "cli" not in path.relative_to(ROOT).parts and _starts_threads(path)
    }
    assert found == set(ALLOWED)
