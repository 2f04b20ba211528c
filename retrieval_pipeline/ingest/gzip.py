"""The one gzip reader: member by member, incremental, and bounded in what it hands out at once.

Trace files are often several gzip members back to back (a writer that appends a member per flush),
may be cut short while still being written, and may be hostile: a few hundred kilobytes can
inflate to gigabytes. `GzipStream` therefore decompresses each block it is fed into chunks of at
most `max_output` bytes, so a reader's memory is bounded by what it keeps, never by the ratio.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

from isal import isal_zlib

# The inflater: ISA-L's, which decompresses about twice as fast as the standard library's zlib and
# has the same interface.
GZIP_INFLATE: ModuleType = isal_zlib

# The most a single call hands out: a block is inflated in chunks of at most this many bytes.
OUTPUT_BYTES = 8 * 2**20

GZIP_MAGIC = b"\x1f\x8b"


class GzipStream:
    """Incremental gunzip of a stream fed block by block.

    `inflate(block)` yields the decompressed bytes in chunks of at most `max_output`. A new member
    may start where one ended. After a corrupt stream `error` says what went wrong and nothing
    more is inflated; `ended` says whether the data fed so far ends exactly at the end of a
    member (a complete file), as opposed to inside one (cut short, or still being written)."""

    def __init__(self, max_output: int = OUTPUT_BYTES) -> None:
        self.max_output = max(int(max_output), 1)
        self.error: str | None = None
        self.inflated = 0  # bytes handed out so far
        self._inflater: Any = GZIP_INFLATE.decompressobj(wbits=31)
        self._fed_any = False

    @property
    def ended(self) -> bool:
        """Whether everything fed so far was whole gzip members (and nothing broke)."""
        return self.error is None and self._fed_any and bool(self._inflater.eof)

    def inflate(self, block: bytes) -> Iterator[bytes]:
        """The decompressed bytes of `block`, in chunks of at most `max_output`."""
        if self.error is not None or not block:
            return
        self._fed_any = True
        data = block
        try:
            while data:
                if self._inflater.eof:  # another member follows
                    self._inflater = GZIP_INFLATE.decompressobj(wbits=31)
                chunk = self._inflater.decompress(data, self.max_output)
                if self._inflater.eof:
                    data = self._inflater.unused_data
                else:
                    data = self._inflater.unconsumed_tail
                if chunk:
                    self.inflated += len(chunk)
                    yield chunk
        except GZIP_INFLATE.error as exc:
            self.error = f"the gzip stream is corrupt after {self.inflated} bytes ({exc})"
