"""An ending's evidence in as few round trips as the bucket allows, one after the other.

At an ending the controller wants, of one attempt's CustomJob: the chief's exit record, every
replica's exit record, the run records, the newest usable checkpoint and the recent commit
markers. They are read in series, on the look's own thread, in two listings and as few object
reads as the trainer's records allow:

- ONE listing of `exits/attempt-NNNN` returns every record of the attempt (the chief's, under
  its keyed and its legacy name, each replica's, each run's). A trainer of this release writes
  each record's JSON into the object's custom metadata too (`trainer.layout.record_metadata`),
  and a GCS listing returns each object's metadata, so no record costs a read of its own. A
  record without it (an older trainer, a record too large, a local root) is read whole; the
  legacy chief's name only when the keyed one is absent from the listing.
- ONE listing of the root's step folders, then the newest steps' commit and quarantine markers,
  newest first: the first usable marker is the latest checkpoint, and the walk goes on only as
  far as the recent markers wanted (the interval keeper's and the figures' cost figures).

GCS lists objects with strong consistency (https://cloud.google.com/storage/docs/consistency),
so a record written before the CustomJob ended is in the listing read after Vertex said so.
"""

from __future__ import annotations

from typing import Any, TypeVar

from trainer import layout

R = TypeVar("R", layout.ExitRecord, layout.ReplicaExit, layout.RunRecord)


def list_records(reader: Any, prefix: str) -> dict[str, dict[str, str]]:
    """Keys (below the root) starting with `prefix`, each with its custom metadata ({} when the
    store keeps none)."""
    if hasattr(reader, "list_records"):
        records: dict[str, dict[str, str]] = reader.list_records(prefix)
        return records
    folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    try:
        keys = reader.list_files(folder)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {key: {} for key in keys if key.startswith(prefix)}


def parse(reader: Any, key: str, metadata: dict[str, str], kind: type[R]) -> R | None:
    """The record at `key`: from its metadata when it carries it, else read whole. None when
    absent or garbled (the reader remembers what it read, for the garbled warning)."""
    carried = metadata.get(layout.RECORD_METADATA_KEY)
    if carried:
        try:
            return kind.from_json(carried)
        except layout.LayoutError:
            pass  # read the object itself: its bytes are the record
    try:
        return kind.from_json(reader.read_bytes(key))
    except (FileNotFoundError, layout.LayoutError):
        return None


def attempt_records(
    reader: Any, attempt: int, vertex_job_id: str | None
) -> tuple[layout.ExitRecord | None, str | None, list[layout.ReplicaExit], list[layout.RunRecord]]:
    """From one listing: the chief's exit record, the legacy record's writer when it was ignored
    as another CustomJob's (else None), the replicas' exit records and the run records."""
    listed = list_records(reader, f"{layout.EXITS_DIR_NAME}/attempt-{attempt:04d}")
    chief, foreign = None, None
    keyed = layout.exit_record_key(attempt, vertex_job_id) if vertex_job_id else None
    if keyed is not None and keyed in listed:
        chief = parse(reader, keyed, listed[keyed], layout.ExitRecord)
    legacy = layout.exit_record_key(attempt)
    if chief is None and legacy in listed:
        record = parse(reader, legacy, listed[legacy], layout.ExitRecord)
        if record is not None and record.vertex_job_id in (None, vertex_job_id):
            chief = record
        elif record is not None:
            foreign = record.vertex_job_id
    replicas = [
        replica
        for key in layout.list_replica_exit_paths(listed, attempt, vertex_job_id)
        if (replica := parse(reader, key, listed[key], layout.ReplicaExit)) is not None
    ]
    runs_folder = layout.runs_key(attempt, vertex_job_id) + "/"
    numbered = sorted(
        (run, key)
        for key in listed
        if key.startswith(runs_folder) and (run := layout.parse_run_key(key)) is not None
    )
    runs = [one for _, key in numbered if (one := parse(reader, key, listed[key], layout.RunRecord))]
    return chief, foreign, replicas, runs
