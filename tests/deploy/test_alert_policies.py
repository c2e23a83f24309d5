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


def paging_table() -> dict[str, tuple[str, set[str], str]]:
    """policy display name -> (policy severity, alert kinds, log severity), from the Paging
    section of docs/alerts.md."""
    section = (REPO / "docs" / "alerts.md").read_text().split("## Paging", 1)[1]
    rows = re.findall(r"^\| (Relaunch: [^|]+) \| ([A-Z]+) \| ([^|]+) \|$", section, re.M)
    table = {}
    for name, severity, kinds in rows:
        log_severity = re.search(r"\((\w+)\)\s*$", kinds)
        table[name.strip()] = (
            severity,
            set(re.findall(r"`([a-z_]+)`", kinds)),
            log_severity and log_severity.group(1),
        )
    return table


def policies() -> dict[str, tuple[str, set[str], str]]:
    """The same, from deploy/alert-policies.yaml."""
    found = {}
    for policy in yaml.safe_load_all((REPO / "deploy" / "alert-policies.yaml").read_text()):
        filters = " ".join(c["conditionMatchedLog"]["filter"] for c in policy["conditions"])
        severity = re.search(r"\bseverity=(\w+)", filters)
        found[policy["displayName"]] = (
            policy["severity"],
            set(re.findall(r'alert_kind="([a-z_]+)"', filters)),
            severity.group(1) if severity else "any",
        )
    return found


def test_the_paging_table_in_the_docs_is_the_policy_file():
    assert len(paging_table()) >= 4
    assert paging_table() == policies()


def test_each_paging_alert_kind_has_exactly_one_policy():
    paged = [kind for _, kinds, _ in policies().values() for kind in kinds]
    assert len(paged) == len(set(paged))
    assert {k for k, s in documented_kinds().items() if s in ("ERROR", "WARNING")} == set(paged)
