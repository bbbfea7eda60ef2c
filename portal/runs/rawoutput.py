"""Raw command output as evidence: the exact bytes, compressed, with their SHA-256; and the display
copy the pages show.

A tool may print anything: NUL (PostgreSQL text refuses it), bytes that are not UTF-8, a binary
dump. The bytes the transport read (worker/ssh.py CappedStream: head and tail past its read cap,
with a marker line) are kept as they are in `CheckResult.stdout_raw`/`stderr_raw`, zlib-compressed,
and their SHA-256 (of the uncompressed bytes) in `stdout_sha256`/`stderr_sha256`: the result page
offers them for download, and `sha256sum` of the download gives the digest a certificate cites.

The display copy (`CheckResult.stdout`/`stderr`) is text that any database and page accepts:
- the bytes are decoded as UTF-8;
- a NUL, and every byte that is not part of valid UTF-8, is shown as the four characters `\\xNN`
  (its value in hex), so `printf 'a\\0b\\377'` shows as `a\\x00b\\xff`. A literal `\\x00` printed
  by the tool looks the same: the raw download is the exact record;
- past KILN_OUTPUT_CAP characters, the first 3/4 and the last 1/4 are shown, with a line saying
  how many bytes of the raw output are not shown.

Parsers never see the display copy: they read CommandOutput.stdout (the transport's decoding).
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# zlib's default trade-off (level 6): a 16 MiB text output compresses in ~0.1 s on these machines;
# level 9 costs several times that for a few per cent less.
COMPRESS_LEVEL = 6
# A UTF-8 character is at most 4 bytes: a window of 4 bytes per display character always holds
# enough of the output to fill the display, whatever it is made of.
_BYTES_PER_CHAR = 4
# Characters the display copy escapes: NUL, and the lone surrogates that `surrogateescape` makes of
# bytes that are not valid UTF-8 (U+DC80..U+DCFF stand for the bytes 0x80..0xFF).
_ESCAPED = re.compile("[\x00\udc80-\udcff]")
# Lone surrogates of any kind (and NUL) in text that did not come from bytes we decoded ourselves:
# neither PostgreSQL nor UTF-8 can hold them.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class PackedOutput:
    """One stream of a result, ready to store."""

    compressed: bytes
    sha256: str
    size: int  # bytes, uncompressed
    display: str
    display_cut: bool  # the display copy leaves out part of the bytes


def _escape(decoded: str) -> str:
    return _ESCAPED.sub(lambda m: f"\\x{ord(m.group()) & 0xFF:02x}", decoded)


def _escapes(decoded: str) -> int:
    """How many characters of a surrogateescape decoding the display shows as `\\xNN`."""
    surrogates = len(decoded.encode("utf-8", "surrogateescape")) - len(decoded.encode("utf-8", "ignore"))
    return decoded.count("\x00") + surrogates


def _shown(decoded: str) -> int:
    """Characters of the display copy of `decoded` (each escape is 4 characters: 3 more)."""
    return len(decoded) + 3 * _escapes(decoded)


def _head(window: bytes, limit: int) -> tuple[str, int]:
    """The longest start of `window` whose display fits in `limit` characters: (display, bytes)."""
    decoded = window.decode("utf-8", "surrogateescape")
    low, high = 0, min(len(decoded), limit)
    while low < high:  # the display length grows with the prefix: binary search for the last fit
        mid = (low + high + 1) // 2
        if _shown(decoded[:mid]) <= limit:
            low = mid
        else:
            high = mid - 1
    kept = decoded[:low]
    return _escape(kept), len(kept.encode("utf-8", "surrogateescape"))


def _tail(window: bytes, limit: int) -> tuple[str, int]:
    """The longest end of `window` whose display fits in `limit` characters: (display, bytes)."""
    decoded = window.decode("utf-8", "surrogateescape")
    low, high = max(0, len(decoded) - limit), len(decoded)
    while low < high:  # the display length shrinks as the start moves right: the first fit
        mid = (low + high) // 2
        if _shown(decoded[mid:]) <= limit:
            high = mid
        else:
            low = mid + 1
    kept = decoded[low:]
    return _escape(kept), len(kept.encode("utf-8", "surrogateescape"))


def _slice(parts: list[bytes], start: int, end: int) -> bytes:
    """bytes(b"".join(parts)[start:end]) without joining the parts."""
    out = bytearray()
    offset = 0
    for part in parts:
        if offset >= end:
            break
        if offset + len(part) > start:
            out += part[max(0, start - offset) : end - offset]
        offset += len(part)
    return bytes(out)


def display_copy(parts: list[bytes], size: int, cap: int) -> tuple[str, bool]:
    """The escaped display text of the concatenated parts (`size` bytes in all), at most `cap`
    characters of output plus, when cut, one marker line. Reads at most ~8 x cap bytes."""
    cap = max(4, cap)
    if size <= _BYTES_PER_CHAR * cap:
        whole = _slice(parts, 0, size).decode("utf-8", "surrogateescape")
        if _shown(whole) <= cap:
            return _escape(whole), False
    head_limit = cap * 3 // 4
    head, head_bytes = _head(_slice(parts, 0, min(size, _BYTES_PER_CHAR * head_limit)), head_limit)
    tail_limit = cap - head_limit
    tail_start = max(head_bytes, size - _BYTES_PER_CHAR * tail_limit)
    tail, tail_bytes = _tail(_slice(parts, tail_start, size), tail_limit)
    cut = size - head_bytes - tail_bytes
    marker = f"\n[... {cut} bytes cut by Kiln from this display copy; the raw output download keeps them ...]\n"
    return head + marker + tail, True


def pack(parts: Iterable[bytes], *, cap: int) -> PackedOutput:
    """Compress and hash the concatenation of `parts` (never joined: a 16 MiB output is not copied
    whole), and make its display copy."""
    kept = [bytes(p) for p in parts if p]
    compressor = zlib.compressobj(COMPRESS_LEVEL)
    digest = hashlib.sha256()
    chunks = []
    size = 0
    for part in kept:
        digest.update(part)
        chunks.append(compressor.compress(part))
        size += len(part)
    chunks.append(compressor.flush())
    display, cut = display_copy(kept, size, cap)
    return PackedOutput(b"".join(chunks), digest.hexdigest(), size, display, cut)


def unpack(compressed: bytes | memoryview | None, *, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The stored bytes again, `chunk` bytes at a time (a download never inflates it all at once)."""
    if compressed is None:
        return
    data = bytes(compressed)
    decompressor = zlib.decompressobj()
    view = memoryview(data)
    for start in range(0, len(data), chunk):
        out = decompressor.decompress(view[start : start + chunk], chunk)
        yield out
        while decompressor.unconsumed_tail:
            yield decompressor.decompress(decompressor.unconsumed_tail, chunk)
    rest = decompressor.flush()
    if rest:
        yield rest


def raw_bytes(compressed: bytes | memoryview | None) -> bytes | None:
    """The whole stored stream (tests, exports of one result); None when none was stored."""
    return None if compressed is None else b"".join(unpack(compressed))


def text_bytes(text: str) -> bytes:
    """Bytes for output that only exists as text (a CommandOutput built from a string): UTF-8, with
    a lone surrogate written as its escape, never an error."""
    return text.encode("utf-8", "backslashreplace")


def storable(text: str) -> str:
    """Text a parser or check made from tool output (a reason, a measurement's text), made safe for
    the database: NUL and lone surrogates written as escapes (`\\x00`, `\\udc80`)."""
    if not _UNSTORABLE.search(text):
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}" if m.group() != "\x00" else "\\x00", text)


def storable_json(value: Any) -> Any:
    """`storable` through a JSON value (labels, attribution): PostgreSQL jsonb refuses \\u0000 too."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(str(k)) if isinstance(k, str) else k: storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v) for v in value]
    return value


def excerpt(text: str, *, cap: int, note: str) -> str:
    """`text` cut to its first 3/4 and last 1/4 of `cap` characters around one marker line saying
    how much is gone and why (`note`); unchanged when it fits. Retention keeps this of old outputs."""
    if len(text) <= cap:
        return text
    head = cap * 3 // 4
    tail = cap - head
    cut = len(text) - head - tail
    return text[:head] + f"\n[... {cut} characters {note} ...]\n" + (text[-tail:] if tail else "")
