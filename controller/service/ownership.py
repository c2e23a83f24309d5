"""A checkpoint root belongs to one job.

Two jobs writing (or reading) one root would take each other's checkpoints into their timelines
and goodput and resume from them. So the intake claims the root for the job with a create-only
record under `checkpoint-roots/` before it records the job, and refuses a request whose root is
another job's, lies inside another job's root, or contains one. The same job asking again (a
duplicate delivery) finds its own claim and goes on.

Claim keys hash each path segment, so the claim of `gs://b/runs` is a key prefix of the claim of
`gs://b/runs/a`: roots inside a root are found with one `list`, roots above it with one `get` per
level.

No lock: intakes claim side by side. A claim is written first and checked after: the
create-only write settles two claims of one root, and for roots that overlap, whoever finds the
other's claim after writing its own withdraws it and is refused. Of two overlapping claims made
at once at least one sees the other, so an overlap is never granted; at worst both see each
other and both requests are refused as conflicts (they named overlapping roots, which is the
user's error either way). The intake makes the claim inside the store's `together` with the
job's record: on SQLite the claim, its check and the record are one write of the group commit,
where claims are made one after the other and the later one sees the earlier (a claim seen
before its commit shares that commit, so nothing is decided from a claim that could be lost);
on GCS each is its own step, as described here.

A claim lives as long as its job's record: when retention deletes a finished job, its claim goes
too, and the root may be named again (the new job then resumes from what it finds there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller.settings import Settings
from controller.store import AlreadyExists, StateStore, StoreOps
from controller.store.keys import CHECKPOINT_ROOTS_PREFIX, checkpoint_root_key

# A claim key must stay within the store's 512 characters: 17 + 11 per level.
MAX_ROOT_LEVELS = 40


@dataclass(frozen=True)
class Refusal:
    status: Literal["invalid", "conflict"]  # the intake status to answer with
    reason: str


def root_segments(uri: str) -> list[str]:
    """`gs://bucket/a/b` -> ["gs://bucket", "a", "b"]; `file:///x/y` -> ["file://", "x", "y"]."""
    scheme, _, rest = uri.partition("://")
    parts = [part for part in rest.rstrip("/").split("/") if part]
    if scheme == "gs":
        return [f"gs://{parts[0]}", *parts[1:]] if parts else ["gs://"]
    return [f"{scheme}://", *parts]


def root_of(uri: str) -> str:
    """The root a checkpoint URI names, as claims spell it (trailing and doubled slashes dropped)."""
    return "/".join(root_segments(uri))


def bucket_refusal(uri: str, settings: Settings) -> Refusal | None:
    allowed = settings.checkpoint_bucket_allow_list
    if not allowed or not uri.startswith("gs://"):
        return None
    bucket = uri[len("gs://") :].split("/", 1)[0]
    if bucket in allowed:
        return None
    return Refusal(
        "invalid",
        f"checkpoint.uri: bucket {bucket!r} is not one of the checkpoint buckets this controller may "
        f"use ({', '.join(sorted(allowed))}; RELAUNCH_CHECKPOINT_BUCKETS)",
    )


def claim_checkpoint_root(
    store: StoreOps, job_id: str, uri: str, settings: Settings, *, fence: int = 0
) -> Refusal | None:
    """Claim `uri` for `job_id`; None when the job owns it (now or already), else why not."""
    refusal = bucket_refusal(uri, settings)
    if refusal is not None:
        return refusal
    segments = root_segments(uri)
    if len(segments) > MAX_ROOT_LEVELS:
        return Refusal(
            "invalid",
            f"checkpoint.uri: at most {MAX_ROOT_LEVELS - 1} folder levels (got {len(segments) - 1})",
        )
    root = "/".join(segments)
    key = checkpoint_root_key(segments)
    try:
        mine: int | None = store.create(key, {"root": root, "jobId": job_id}, fence=fence)
    except AlreadyExists:
        claim = store.get(key)
        if claim is not None and claim.document.get("jobId") != job_id:
            owner = claim.document.get("jobId")
            return Refusal("conflict", f"checkpoint.uri: {uri} is the checkpoint root of job {owner!r}")
        mine = None  # ours already (a duplicate delivery): check the neighbours all the same
    refusal = _overlap(store, job_id, uri, segments, root, key)
    if refusal is not None and mine is not None:
        store.delete(key, expected_version=mine)  # withdraw: the other claim stands
    return refusal


def _overlap(
    store: StoreOps, job_id: str, uri: str, segments: list[str], root: str, key: str
) -> Refusal | None:
    """Another job's claim above this root (or on a folder above it), or inside it."""
    for depth in range(2, len(segments)):  # every folder above the root
        claim = store.get(checkpoint_root_key(segments[:depth]))
        if claim is None or claim.document.get("jobId") == job_id:
            continue
        owner, owned = claim.document.get("jobId"), claim.document.get("root")
        if owned != "/".join(segments[:depth]):
            continue  # a hash collision with another name: not an overlap
        return Refusal(
            "conflict", f"checkpoint.uri: {uri} is inside {owned}, the checkpoint root of job {owner!r}"
        )
    for inner in store.list(key + "/"):
        owner, owned = inner.document.get("jobId"), str(inner.document.get("root", ""))
        if owner != job_id and owned.startswith(root + "/"):
            return Refusal(
                "conflict",
                f"checkpoint.uri: {uri} contains {owned}, the checkpoint root of job {owner!r}",
            )
    return None


def release_checkpoint_root(store: StateStore, job_id: str, uri: str) -> bool:
    """Delete `job_id`'s claim on `uri` (its record is being deleted); False if it had none."""
    claim = store.get(checkpoint_root_key(root_segments(uri)))
    if claim is None or claim.document.get("jobId") != job_id:
        return False
    store.delete(claim.key, expected_version=claim.version)
    return True


__all__ = ["CHECKPOINT_ROOTS_PREFIX", "Refusal", "claim_checkpoint_root", "release_checkpoint_root"]
