"""A real headless Chromium (Debian's `chromium` package), driven over the DevTools protocol.

    with Browser(tmp_path) as browser:
        browser.open("http://127.0.0.1:8080/")
        text = browser.evaluate("document.body.innerText")
        browser.screenshot(tmp_path / "page.png")

Never downloads a browser: it uses /usr/bin/chromium (the Makefile's test setup installs it).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
]


class Browser:
    def __init__(self, workdir: Path, timeout: float = 60.0):
        self.profile = Path(workdir) / "chromium-profile"
        self.timeout = timeout
        self.proc = None
        self.socket = None
        self._closing = contextlib.ExitStack()
        self._ids = itertools.count(1)

    def __enter__(self) -> Browser:
        from websockets.sync.client import connect

        self.profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._until(self._port, "chromium's DevTools port")
        page = self._until(lambda: self._page(port), "a page target")
        self.socket = self._closing.enter_context(
            connect(page, max_size=64 * 1024 * 1024, open_timeout=self.timeout)
        )
        self.call("Page.enable")
        return self

    def __exit__(self, *exc) -> None:
        self._closing.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)

    def _until(self, probe, what: str):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before {what}")
            found = probe()
            if found:
                return found
            time.sleep(0.1)  # polling a file and an HTTP endpoint chromium creates as it starts
        raise TimeoutError(f"no {what} after {self.timeout}s")

    def _port(self) -> int | None:
        try:
            return int((self.profile / "DevToolsActivePort").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def _page(port: int) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as reply:
                targets = json.loads(reply.read())
        except OSError:
            return None
        pages = [t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page"]
        return pages[0] if pages else None

    def call(self, method: str, **params):
        """Send one DevTools command; its result (events that arrive meanwhile are kept)."""
        ident = next(self._ids)
        self.socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=self.timeout))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    _events: list = []

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self._events = []
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{url} did not load in {self.timeout}s")
            self._events.append(json.loads(self.socket.recv(timeout=remaining)))

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)
