"""Helpers for tests that drive `relaunch devstack` as a user would: as a command."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture
def relaunch():
    """Run the installed `relaunch` command; returns the CompletedProcess (text mode)."""
    command = os.path.join(os.path.dirname(sys.executable), "relaunch")

    def run(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([command, *args], capture_output=True, text=True, timeout=timeout,
                              env=env)

    return run
