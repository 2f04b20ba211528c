"""Files that readers must see whole: every report, approval and state file is written here.

A reader (a deploy system, a check that reads a report back, a person) sees the old file or the
new one, never half of one, even when the process is killed mid-write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def write_atomically(texts: Mapping[Path, str | bytes]) -> None:
    """Write each text (str as UTF-8, or bytes) beside its path, then rename them over their
    paths. Files written together are renamed back to back, after all are written, so that a
    killed run leaves an old and a new one side by side only if it dies between two renames.
    When a write fails, none is replaced and no partial file is left behind."""
    partials = {path: path.with_name(f".{path.name}.partial") for path in texts}
    try:
        for path, text in texts.items():
            data = text.encode("utf-8") if isinstance(text, str) else text
            with open(partials[path], "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
    except OSError:
        for partial in partials.values():
            if partial.is_file():
                partial.unlink()
        raise
    for path, partial in partials.items():
        os.replace(partial, path)


def write_text_atomically(path: Path, text: str) -> None:
    """One file, written as `write_atomically` writes several."""
    write_atomically({path: text})
