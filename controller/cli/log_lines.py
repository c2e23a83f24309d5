"""Turning replica log lines into what `relaunch logs` prints: one human line per record
(`16:50:01  workerpool0-0  INFO   resumed from step 40  step=40`), or the raw record with its
replica's name (`--json`); and the `--since` window. Pure text work, no I/O."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from controller.readmodel.printable import printable

# Fields every trainer line has; the others are shown as key=value after the message.
_OWN_FIELDS = ("time", "severity", "message", "level", "timestamp")
_DURATION = re.compile(r"^(?P<count>\d+(?:\.\d+)?)(?P<unit>[smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Record:
    replica: str
    raw: str
    fields: dict | None  # the parsed JSON object, None for a plain-text line
    time: float | None  # epoch seconds from the record's own `time`, if it has one


def parse(replica: str, raw: str) -> Record:
    fields = None
    if raw.startswith("{"):
        try:
            loaded = json.loads(raw)
            fields = loaded if isinstance(loaded, dict) else None
        except ValueError:
            fields = None
    return Record(replica, raw, fields, _time_of(fields))


def _time_of(fields: dict | None) -> float | None:
    text = (fields or {}).get("time") or (fields or {}).get("timestamp")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def interleave(records_by_replica: dict[str, list[Record]]) -> list[Record]:
    """Every replica's records in one list, by time. A line without a time keeps its place
    after the timed line before it in its own file (a traceback stays with its message)."""
    keyed = []
    for replica, records in records_by_replica.items():
        last = float("-inf")
        for index, record in enumerate(records):
            last = record.time if record.time is not None else last
            keyed.append(((last, replica, index), record))
    return [record for _, record in sorted(keyed, key=lambda pair: pair[0])]


def human(record: Record, width: int) -> str:
    """One line a person reads; every string made printable (a log line is someone else's)."""
    name = record.replica.ljust(width)
    if record.fields is None:
        return f"{'':8}  {name}  {printable(record.raw, keep_tabs=True)}"
    when = datetime.fromtimestamp(record.time, UTC).strftime("%H:%M:%S") if record.time else ""
    severity = str(record.fields.get("severity") or record.fields.get("level") or "").upper()
    message = printable(record.fields.get("message", ""))
    extra = " ".join(
        f"{key}={printable(value)}" for key, value in record.fields.items() if key not in _OWN_FIELDS
    )
    return f"{when:8}  {name}  {severity:7}{message}" + (f"  {extra}" if extra else "")


def as_json(record: Record) -> str:
    """The raw record, with the replica it came from; a plain-text line as {"message": ...}."""
    fields = dict(record.fields) if record.fields is not None else {"message": record.raw}
    return json.dumps({"replica": record.replica, **fields}, ensure_ascii=True)


def since_seconds(text: str) -> float:
    """`--since`: a duration back from now (30s, 10m, 2h, 1d)."""
    found = _DURATION.match(text.strip())
    if not found:
        raise ValueError(f"--since takes a duration such as 30s, 10m, 2h or 1d (got {text!r})")
    return float(found.group("count")) * _UNIT_SECONDS[found.group("unit")]
