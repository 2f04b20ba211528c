"""Decompressed bytes cut into pieces of whole lines, with every piece bounded whatever the input.

A JSON-lines file is read as chunks of at most a few megabytes (`ingest.gzip.GzipStream` bounds
what a gzip block inflates to at once) and cut into pieces for validation. Hostile input must not
make a piece large (issue 27): a gzip bomb of newlines inflates 1,000 to 1, one line may hold tens
of megabytes, and ten million short lines cost a row each. So:

- a piece ends at the last newline once it holds `piece_bytes` bytes or `piece_lines` lines; the
  first piece of a file once it holds `first_piece_bytes`, so that its validation starts while
  the rest of the file is still being read;
- blank lines at a piece's start are counted and dropped: a run of them costs no memory;
- a line longer than `BIG_LINE` bytes goes in a piece of its own: DuckDB's validation of a
  64 MiB piece of 2 MiB lines ran out of its 512MB (one line of 16 MiB, or 60 of 1 MiB, did not);
- a line longer than `max_line_bytes` is not kept: its first bytes stand in for it, and the piece
  names it in `line_errors` with its size, so that it is quarantined like any other bad record.

Pure: bytes in, pieces out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from retrieval_pipeline.environment import DEFAULT_MAX_LINE_BYTES

# A piece ends at the last newline once it holds this many lines: a line is a row of Arrow arrays
# and of the validation's tables, so ten million short bad lines in one piece held gigabytes.
# Real traces (hundreds of bytes to kilobytes) reach the piece's bytes first.
PIECE_LINES = 250_000
# The longest line kept by default (see there why).
MAX_LINE_BYTES = DEFAULT_MAX_LINE_BYTES
# A line longer than this is validated in a piece of its own.
BIG_LINE = 2**20
# How much of a line that is too long is kept, for the quarantine to show.
KEPT_PREFIX = 200


def too_long_reason(size: int, limit: int) -> str:
    """The reason a line too long to read is quarantined with."""
    return (
        f"the line is too long to read: {size:,} bytes, more than the limit of {limit:,} "
        "(RETRIEVAL_PIPELINE_MAX_LINE_BYTES)"
    )


@dataclass
class LinePiece:
    """Whole lines of a file: `data` starts at line `first_line` and ends with a newline, except
    the file's last piece. `line_errors` maps a line number to why that line cannot be read (a
    line too long: `data` holds only its first bytes)."""

    data: bytes
    first_line: int
    at_file_start: bool
    line_errors: dict[int, str] = field(default_factory=dict)
    # cut once full (the file may go on after it), not the rest that `finish` hands out
    continues: bool = False


class LineSplitter:
    """Feed chunks in file order (`feed`), then `finish`; each yields the pieces completed.

    Memory: the pieces handed out, plus at most `piece_bytes` + `max_line_bytes` + a chunk held
    here, whatever the chunks hold."""

    def __init__(
        self,
        piece_bytes: int,
        piece_lines: int = PIECE_LINES,
        max_line_bytes: int = MAX_LINE_BYTES,
        first_piece_bytes: int | None = None,
    ) -> None:
        self.piece_bytes = max(int(piece_bytes), 1)
        # the bytes that end the next piece: the first piece's, then every piece's
        self._limit = min(max(int(first_piece_bytes or piece_bytes), 1), self.piece_bytes)
        self.piece_lines = max(int(piece_lines), 1)
        self.max_line_bytes = max(int(max_line_bytes), 1)
        # within a step of this many bytes a line that lies wholly inside is neither big nor
        # too long, and the lines are at most a piece's count
        self._step = min(BIG_LINE, self.max_line_bytes, self.piece_lines)
        self._blocks: list[bytes] = []
        self._size = 0  # bytes in _blocks
        self._newlines = 0  # newlines in _blocks
        self._tail = 0  # bytes after the last newline in _blocks (a line not yet ended)
        self._first_line = 1
        self._at_file_start = True
        self._errors: dict[int, str] = {}
        self._skipping = False  # inside a line too long: its bytes are counted, not kept
        self._skipped = 0
        self._prefix = b""
        self._big_ended = False  # a big line ended in this piece: it ends here too

    def feed(self, chunk: bytes) -> Iterator[LinePiece]:
        """The pieces that `chunk` completes."""
        newlines = self._fits_whole(chunk)
        if newlines is not None:
            # the common case, kept without copying: no line in it is big or too long, and its
            # lines do not take the piece past its count
            self._keep(chunk, newlines=newlines)
            newline = chunk.rfind(b"\n")
            self._tail = self._tail + len(chunk) if newline < 0 else len(chunk) - newline - 1
            steps: Iterable[int] = ()
        else:
            steps = range(0, len(chunk), self._step)
        for start in steps:
            self._take(chunk, start, min(start + self._step, len(chunk)))
            yield from self._cut_if_full()
        yield from self._cut_if_full()

    def finish(self, always: bool = False) -> Iterator[LinePiece]:
        """The last piece: what remains, its last line without a newline (or a line too long);
        with `always`, a piece even when nothing remains (to carry an error)."""
        if self._skipping:
            self._end_long_line(newline=False)
        piece = self._cut(everything=True, always=always)
        if piece is not None:
            yield piece

    def _fits_whole(self, chunk: bytes) -> int | None:
        """The newlines of `chunk` when it can be kept as it is (else None): no line in it, or
        continued or begun by it, is longer than `limit` (neither big nor too long), and its
        lines fit the piece's count.

        A line longer than `limit` inside the chunk would cover a whole aligned window of
        `window` bytes, so a newline in every window rules it out at memchr's speed."""
        limit = min(BIG_LINE, self.max_line_bytes)
        window = max(1, (limit + 1) // 2)
        first, last = chunk.find(b"\n"), chunk.rfind(b"\n")
        fits = (
            not self._skipping
            and self._size > 0  # no leading blank lines to drop
            and first >= 0
            and self._tail + first <= limit
            and len(chunk) - last - 1 <= limit
            and all(chunk.find(b"\n", w, w + window) >= 0 for w in range(0, last, window))
        )
        newlines = chunk.count(b"\n") if fits else 0
        return newlines if fits and self._newlines + newlines < self.piece_lines else None

    def _cut_if_full(self) -> Iterator[LinePiece]:
        big_opened = self._tail > BIG_LINE and self._newlines > 0  # the lines before it, alone
        full = self._size >= self._limit or self._newlines >= self.piece_lines
        if full or big_opened or self._big_ended:
            piece = self._cut()
            if piece is not None:
                self._limit = self.piece_bytes
                yield piece

    # --- one step of a chunk -------------------------------------------------------------------

    def _take(self, chunk: bytes, a: int, b: int) -> None:
        while a < b:
            if self._skipping:
                newline = chunk.find(b"\n", a, b)
                end = b if newline < 0 else newline
                if len(self._prefix) < KEPT_PREFIX:  # the line's first bytes, still wanted
                    self._prefix += chunk[a : min(end, a + KEPT_PREFIX - len(self._prefix))]
                self._skipped += end - a
                if newline < 0:
                    return
                self._end_long_line(newline=True)
                a = newline + 1
                continue
            if self._size == 0:  # a piece's leading blank lines: counted, never kept
                kept = chunk[a:b].lstrip(b"\n")
                self._first_line += (b - a) - len(kept)
                a = b - len(kept)
                if a == b:
                    return
            first = chunk.find(b"\n", a, b)
            line_end = b if first < 0 else first
            if self._tail + (line_end - a) > self.max_line_bytes:
                self._start_long_line(chunk[a:line_end])
                a = line_end
                continue
            if first < 0:
                self._keep(chunk[a:b], newlines=0)
                self._tail += b - a
                return
            if self._tail + (first - a) > BIG_LINE:
                self._big_ended = True
            last = chunk.rfind(b"\n", a, b)
            self._keep(chunk[a:b], newlines=chunk.count(b"\n", a, b))
            self._tail = b - last - 1
            return

    def _keep(self, data: bytes, newlines: int) -> None:
        self._blocks.append(data)
        self._size += len(data)
        self._newlines += newlines

    def _start_long_line(self, part: bytes) -> None:
        """The line being read is too long: keep its first bytes, drop the rest from here on."""
        tail_bytes = self._tail
        tail = self._drop_tail()
        self._prefix = (tail + part[:KEPT_PREFIX])[:KEPT_PREFIX]
        self._skipped = tail_bytes + len(part)
        self._skipping = True

    def _drop_tail(self) -> bytes:
        """Remove the unfinished line from the end of the blocks; return it (its first bytes)."""
        left, kept = self._tail, b""
        while left:
            block = self._blocks.pop()
            self._size -= len(block)
            if len(block) > left:
                self._blocks.append(block[:-left])
                self._size += len(block) - left
                kept = block[-left:] + kept
                left = 0
            else:
                kept = block + kept
                left -= len(block)
            kept = kept[:KEPT_PREFIX]
        self._tail = 0
        return kept

    def _end_long_line(self, newline: bool) -> None:
        """The line too long has ended: its first bytes stand in for it, with its reason."""
        number = self._first_line + self._newlines
        self._errors[number] = too_long_reason(self._skipped, self.max_line_bytes)
        stand_in = self._prefix or b"-"
        self._keep(stand_in + (b"\n" if newline else b""), newlines=int(newline))
        self._tail = 0 if newline else len(stand_in)
        self._skipping, self._skipped, self._prefix = False, 0, b""

    # --- cutting -------------------------------------------------------------------------------

    def _cut(self, everything: bool = False, always: bool = False) -> LinePiece | None:
        """A piece of the whole lines held (`everything`: all that is held), or None."""
        if everything:
            if not self._blocks and not self._at_file_start and not always:
                return None
            data = b"".join(self._blocks)
            rest: list[bytes] = []
        else:
            last = next(
                (i for i in range(len(self._blocks) - 1, -1, -1) if b"\n" in self._blocks[i]),
                None,
            )
            if last is None:
                return None
            cut = self._blocks[last].rfind(b"\n") + 1
            data = b"".join([*self._blocks[:last], self._blocks[last][:cut]])
            rest = [
                block for block in (self._blocks[last][cut:], *self._blocks[last + 1 :]) if block
            ]
        lines = self._newlines  # the rest, after the last newline, holds none
        end = self._first_line + lines + (0 if everything else -1)
        errors = {n: e for n, e in self._errors.items() if n <= end}
        piece = LinePiece(data, self._first_line, self._at_file_start, errors, not everything)
        self._errors = {n: e for n, e in self._errors.items() if n > end}
        self._blocks = rest
        self._size = sum(map(len, rest))
        self._newlines -= lines
        self._first_line += lines
        self._at_file_start = False
        self._big_ended = False
        return piece


def split_lines(
    chunks: Iterable[bytes],
    piece_bytes: int,
    piece_lines: int = PIECE_LINES,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[LinePiece]:
    """`chunks` (a file's bytes in order) as pieces of whole lines (see `LineSplitter`)."""
    splitter = LineSplitter(piece_bytes, piece_lines, max_line_bytes)
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.finish()
