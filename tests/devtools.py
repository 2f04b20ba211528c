"""Headless Chromium driven through its DevTools protocol, for pages that draw with JavaScript
(the Dagster UI): open a URL, wait for something, click, take a screenshot.

Chromium runs in a temporary profile, in its own process group, with its network features off;
it is stopped by that group on the way out. Only 127.0.0.1 is ever opened.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from tests.browser import headless_flags
from tests.processes import (
    answers,
    default_signals,
    free_port,
    require_tool,
    stop_group,
    wait_until,
)


class Page:
    """One browser tab: `js` evaluates an expression, `wait_for` polls one until it is truthy."""

    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._next = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        self._socket.send(json.dumps({"id": self._next, "method": method, "params": params}))
        while True:  # events arrive in between; the reply carries the call's id
            message = json.loads(self._socket.recv())
            if message.get("id") == self._next:
                assert "error" not in message, message
                return dict(message.get("result", {}))

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, within_s: float = 90) -> Any:
        deadline = time.monotonic() + within_s
        while not (value := self.js(expression)):
            assert time.monotonic() < deadline, f"{what} not seen within {within_s} s"
            time.sleep(0.25)
        return value

    def open(self, url: str, width: int = 1400, height: int = 2000) -> None:
        assert url.startswith("http://127.0.0.1:"), url
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path


@contextlib.contextmanager
def chromium_page(folder: Path) -> Iterator[Page]:
    chromium = require_tool("chromium")
    port = free_port()
    process = subprocess.Popen(
        [
            chromium,
            *headless_flags(folder / "profile"),
            f"--remote-debugging-port={port}",
            "--remote-allow-origins=*",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=default_signals,
    )
    try:
        listing = f"http://127.0.0.1:{port}/json/list"
        wait_until(lambda: answers(listing), process, "chromium's DevTools", 60)
        with urllib.request.urlopen(listing, timeout=5) as response:
            targets = json.load(response)
        (tab,) = [t for t in targets if t["type"] == "page"][:1]
        with connect(tab["webSocketDebuggerUrl"], max_size=64 * 2**20) as socket:
            yield Page(socket)
    finally:
        stop_group(process)
