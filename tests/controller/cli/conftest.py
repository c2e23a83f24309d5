"""Every CLI test gets its own, empty CLI config directory and leaves os.environ as it found it:
`relaunch` copies its config into the environment, and a developer's own
~/.config/relaunch must never leak into a test (nor a test's into the next)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def isolated_cli_config(tmp_path, monkeypatch):
    saved = dict(os.environ)
    monkeypatch.setenv("RELAUNCH_CONFIG_DIR", str(tmp_path / "relaunch-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    yield tmp_path / "relaunch-config"
    os.environ.clear()
    os.environ.update(saved)
