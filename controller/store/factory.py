"""Open the state store a URL names (the `RELAUNCH_STATE_STORE` setting).

sqlite:///var/lib/relaunch/state.db   absolute path (three slashes)
sqlite://state.db                     path relative to the working directory
gs://bucket/prefix                    GcsStateStore, one object per key under prefix
"""

from __future__ import annotations

from controller.store.base import StateStore

_FORMS = "sqlite:///abs/path, sqlite://relative/path or gs://bucket/prefix"


def open_store(url: str, *, gcs_client=None) -> StateStore:
    if url.startswith("sqlite://"):
        from controller.store.sqlite import SqliteStateStore

        path = url[len("sqlite://") :]
        if not path:
            raise ValueError(f"state store URL {url!r} names no file; use {_FORMS}")
        return SqliteStateStore(path)
    if url.startswith("gs://"):
        from controller.store.gcs import GcsStateStore

        bucket, _, prefix = url[len("gs://") :].partition("/")
        if not bucket:
            raise ValueError(f"state store URL {url!r} names no bucket; use {_FORMS}")
        return GcsStateStore(bucket, prefix.strip("/"), client=gcs_client)
    raise ValueError(f"unsupported state store URL {url!r}; use {_FORMS}")
