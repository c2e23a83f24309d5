"""Cloud Storage stand-in: the GCS JSON API, as `STORAGE_EMULATOR_HOST` expects.

    from devstack.gcs import start_gcs
    with start_gcs(data_dir="/tmp/gcs") as gcs:       # data_dir=None keeps everything in memory
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url  # then google.cloud.storage.Client() as usual

Built on gcp-storage-emulator (its routes, request parsing, bucket handlers, listing and
object resources), with our own object upload/download/patch/delete handlers where that
library falls short.

Covered
- Buckets: create, get, list, patch, delete (409 when not empty).
- Object uploads: media, multipart and resumable (chunked, any chunk size, resent chunks,
  status queries; bytes are streamed to disk or memory, never re-read per chunk).
- Downloads: whole object or a byte range (`bytes=a-b`, `bytes=a-`, `bytes=-n`; 206 / 416),
  streamed; `X-Goog-Hash` (crc32c, md5) so the client verifies full downloads.
- Object metadata: contentType, custom metadata (patch merges keys, null removes one),
  size, md5Hash, crc32c, generation, metageneration; checksums the client sends with an
  upload are verified (400 on mismatch, as GCS does).
- Generations: strictly increasing per server; `generation=` on get/download/patch/delete
  must name the live generation (404 otherwise).
- Preconditions ifGenerationMatch (0 = must not exist), ifGenerationNotMatch,
  ifMetagenerationMatch, ifMetagenerationNotMatch on uploads (checked at the start of a
  resumable session and atomically at its last byte), metadata get/patch, download and
  delete, answered with 412 conditionNotMet.
- Concurrency: a threading server; each object's check-and-write runs under a per-object
  lock, so of two concurrent create-only writes exactly one wins.
- Connections: HTTP/1.1, kept open between requests (a client's pooled connection serves call
  after call, as Google's clients reuse theirs with the service); `stop()` ends them all.
- Listing with prefix, delimiter (prefixes) and matchGlob, in pages of at most 1,000
  (maxResults, pageToken, nextPageToken).
- Persistence: with data_dir, objects and metadata survive a restart (or a kill: each object
  write appends one journal line, so its cost does not grow with the bucket).

NOT emulated
- Object versioning / non-current generations, soft delete and restore (deletes are hard).
- Preconditions on copy, rewrite and compose (those come from the library, unconditioned);
  object PUT (full update); resumable session cancel (DELETE); unfinished resumable sessions
  do not survive a restart.
- Authentication, IAM enforcement, ACL enforcement, retention policies, lifecycle,
  notifications, signed URLs checks, requester pays, CMEK, the XML API beyond a plain PUT.
"""

from __future__ import annotations

from devstack.gcs.server import GcsEmulator

__all__ = ["GcsEmulator", "start_gcs"]


def start_gcs(host: str = "127.0.0.1", port: int = 0, *, data_dir: str | None = None) -> GcsEmulator:
    """Start serving on host:port (0 = a free port); returns once it accepts connections."""
    return GcsEmulator(host, port, data_dir)
