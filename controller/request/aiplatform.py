"""The Vertex AI API types (`google.cloud.aiplatform_v1`), imported on first use.

Importing `google.cloud.aiplatform_v1` imports every service of the API (well over a hundred
modules; about 5 s of CPU on a quiet core), though the controller uses the JobService and its
types only, and a package's `__init__` always runs before any of its submodules. Cloud Run starts
an instance on demand and after every deploy, and `/readyz` must answer within seconds, so the
modules that name the API import this handle instead: the real package is imported by the first
attribute read (the first request parsed, the first Vertex call), after the controller is ready.

The first import is serialised by a lock of its own. Python's per-module import locks are not
enough for this package: its `__init__` imports its services, and a service's transport imports
the package back, so two threads that enter it from different modules (one parsing a request,
one building the JobService client) can each find the other's module half-initialised and fail
with ImportError (seen in the fault run). `load()` is the one way in, for the handle and for code
that needs a submodule.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

_lock = threading.Lock()  # the first import only; once loaded, reads never take it
_module: ModuleType | None = None


def load() -> ModuleType:
    """`google.cloud.aiplatform_v1`, imported whole (services included) on the first call."""
    global _module
    if _module is None:
        with _lock:
            if _module is None:
                _module = importlib.import_module("google.cloud.aiplatform_v1")
    return _module


if TYPE_CHECKING:
    from google.cloud import aiplatform_v1
else:

    class _OnFirstUse:
        """Stands for the module; each attribute read is the real module's attribute."""

        def __getattr__(self, name: str) -> Any:
            return getattr(load(), name)

    aiplatform_v1 = _OnFirstUse()

__all__ = ["aiplatform_v1", "load"]
