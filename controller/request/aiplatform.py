"""The Vertex AI API types (`google.cloud.aiplatform_v1`), imported on first use.

Importing `google.cloud.aiplatform_v1` imports every service of the API (well over a hundred
modules; about 5 s of CPU on a quiet core), though the controller uses the JobService and its
types only, and a package's `__init__` always runs before any of its submodules. Cloud Run starts
an instance on demand and after every deploy, and `/readyz` must answer within seconds, so the
modules that name the API import this handle instead: the real package is imported by the first
attribute read (the first request parsed, the first Vertex call), after the controller is ready.
`importlib.import_module` holds the import system's per-module lock, so threads that reach it
together import it once. Type checkers see the real module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.cloud import aiplatform_v1
else:

    class _OnFirstUse:
        """Stands for the module; each attribute read is the real module's attribute."""

        def __getattr__(self, name: str) -> Any:
            return getattr(importlib.import_module("google.cloud.aiplatform_v1"), name)

    aiplatform_v1 = _OnFirstUse()

__all__ = ["aiplatform_v1"]
