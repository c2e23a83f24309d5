"""Every alert an operator is told about (docs/alerts.md) reaches a Cloud Monitoring policy of its
severity (deploy/alert-policies.yaml): an alert kind no policy matches is logged and never pages."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def documented_kinds() -> dict[str, str]:
    """kind -> severity, from the table of docs/alerts.md."""
    rows = re.findall(
        r"^\| `([a-z_]+)` \| (ERROR|WARNING|INFO|CRITICAL) \|",
        (REPO / "docs" / "alerts.md").read_text(),
        re.M,
    )
    return dict(rows)


def kinds_paged_at(severity: str) -> set[str]:
    kinds: set[str] = set()
    for policy in yaml.safe_load_all((REPO / "deploy" / "alert-policies.yaml").read_text()):
        for condition in policy["conditions"]:
            text = condition["conditionMatchedLog"]["filter"]
            # A filter without a severity clause matches a line of any severity.
            severity_matches = f"severity={severity}" in text or "severity=" not in text
            if severity_matches and 'alert_state="firing"' in text:
                kinds.update(re.findall(r'alert_kind="([a-z_]+)"', text))
    return kinds


def test_the_alert_table_is_read():
    kinds = documented_kinds()
    assert {"job_failed", "running_shrunk", "checkpoints_unreadable"} <= kinds.keys()


def test_every_documented_warning_or_error_alert_kind_has_a_policy_of_its_severity():
    unpaged = {
        kind: severity
        for kind, severity in documented_kinds().items()
        if severity in ("ERROR", "WARNING") and kind not in kinds_paged_at(severity)
    }
    assert unpaged == {}
