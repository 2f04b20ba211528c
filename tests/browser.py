"""Open an HTML page in headless Chromium: a screenshot and the DOM the browser parsed.

Shared by the report tests; the flags keep Chromium off the network (this machine has none).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.processes import default_signals, require_tool


def headless_flags(profile: Path) -> list[str]:
    """Headless Chromium with a profile of its own and nothing that reaches the network."""
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ]


def render(page: str, tmp_path: Path) -> str:
    """Render `page`; assert it drew a non-blank 1200x2400 screenshot and holds no script
    element once parsed; return the parsed DOM."""
    from PIL import Image

    chromium = require_tool("chromium")
    report = tmp_path / "report.html"
    report.write_text(page, encoding="utf-8")
    shot = tmp_path / "shot.png"
    flags = headless_flags(tmp_path / "profile")
    done = subprocess.run(
        [chromium, *flags, "--window-size=1200,2400", f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1200, 2400)
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 50  # text, charts: not a blank page
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=default_signals,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<script" not in dom.stdout.lower()
    return dom.stdout
