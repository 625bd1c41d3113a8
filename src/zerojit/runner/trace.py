"""A real production request trace: the Azure LLM inference trace 2023, as plain values.

The reference runner replays this trace through the continuous-batching scheduler
(:mod:`zerojit.runner.scheduler`); every prompt and output length in it becomes a shape that the
sparse-MLA metadata kernels see at run time.

Format (the AzurePublicDataset CSV, CRLF or LF line endings)::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,374,44

``TIMESTAMP`` is a wall-clock time with up to 9 fractional digits (the trace has 7, which
``datetime.fromisoformat`` refuses before Python 3.11, so this module parses it itself, exactly,
in integer nanoseconds). ``ContextTokens`` is the prompt length, ``GeneratedTokens`` the output
length, both in tokens.

The data: Microsoft AzurePublicDataset, CC-BY 4.0; cite Patel et al., "Splitwise: Efficient
generative LLM inference using phase splitting", ISCA 2024. See ``runner/data/README.md``.
"""

from __future__ import annotations

import codecs
import csv
import datetime as _dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from zerojit.integrity import refuse_irregular

__all__ = ["DEFAULT_TRACE", "Trace", "TraceError", "TraceRequest", "load_trace"]

#: The first 2,000 requests of the Azure conversation trace 2023, shipped inside the package
#: (with its attribution in ``runner/data/README.md``).
DEFAULT_TRACE: Path = Path(__file__).resolve().parent / "data" / "azure_conv_2023_first2000.csv"

_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TIMESTAMP_RE = re.compile(  # ASCII digits only, as the counts (re's \d also takes other scripts' digits)
    r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$", re.ASCII
)
_NS_PER_S = 1_000_000_000
#: A count as the trace writes it: ASCII digits with an optional sign (``int()`` also takes
#: ``1_000`` and non-ASCII digits such as Arabic-Indic ones, which no trace holds).
_INT_RE = re.compile(r"[+-]?[0-9]+")


class TraceError(ValueError):
    """A trace file that cannot be read as a request trace.

    The message names the file and the 1-based line number of the offending row (line 1 is the
    header), and says what is wrong with it. ``path`` and ``line`` carry the same facts.

    A row whose quoted field holds a line break spans several lines of the file: ``line`` is the
    line the row *starts* on (where a reader of the file, or an editor's search, finds it) and
    ``end_line`` the line it ends on; the message then says ``lines A-B``. For a row on one line
    ``end_line == line``.
    """

    def __init__(self, message: str, *, path: str, line: int, end_line: int | None = None) -> None:
        end_line = line if end_line is None else end_line
        where = f"line {line}" if end_line == line else f"lines {line}-{end_line}"
        super().__init__(f"{path}, {where}: {message}")
        self.path = path
        self.line = line
        self.end_line = end_line


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace.

    Attributes:
        request_id: 0-based position of the request in the trace (its data row index).
        arrival_s: arrival time in seconds since the first request of the trace (the first
            request arrives at 0.0; non-decreasing along the trace).
        prompt_len: prompt length in tokens (>= 1).
        output_len: number of tokens to generate (>= 1).
    """

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int

    @property
    def total_len(self) -> int:
        """``prompt_len + output_len``, in tokens: what the request occupies of ``max_model_len``."""
        return self.prompt_len + self.output_len


@dataclass(frozen=True)
class Trace:
    """A loaded request trace: requests in trace (= arrival) order and how they were adjusted.

    Attributes:
        requests: the requests, in file order (arrival times non-decreasing).
        source: the file the trace was read from, as given to :func:`load_trace`.
        clipped: how many requests were shortened to fit ``max_model_len``.
        zero_output: how many rows had ``GeneratedTokens == 0`` and were given ``output_len=1``
            (an engine samples at least one token from every prefill).
    """

    requests: tuple[TraceRequest, ...]
    source: str
    clipped: int = 0
    zero_output: int = 0

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[TraceRequest]:
        return iter(self.requests)

    def __getitem__(self, index: int) -> TraceRequest:
        return self.requests[index]

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return len(self.requests)

    @property
    def total_prompt_tokens(self) -> int:
        """Sum of prompt lengths, in tokens."""
        return sum(r.prompt_len for r in self.requests)

    @property
    def total_output_tokens(self) -> int:
        """Sum of output lengths, in tokens."""
        return sum(r.output_len for r in self.requests)

    @property
    def total_tokens(self) -> int:
        """Sum of prompt and output lengths, in tokens."""
        return self.total_prompt_tokens + self.total_output_tokens

    @property
    def max_prompt_len(self) -> int:
        """Longest prompt, in tokens (0 for an empty trace)."""
        return max((r.prompt_len for r in self.requests), default=0)

    @property
    def max_output_len(self) -> int:
        """Longest output, in tokens (0 for an empty trace)."""
        return max((r.output_len for r in self.requests), default=0)

    @property
    def max_total_len(self) -> int:
        """Largest ``prompt_len + output_len``, in tokens (0 for an empty trace)."""
        return max((r.total_len for r in self.requests), default=0)

    @property
    def duration_s(self) -> float:
        """Seconds from the first arrival to the last (0.0 for fewer than two requests)."""
        return self.requests[-1].arrival_s if self.requests else 0.0


def _parse_timestamp_ns(text: str, *, path: str, line: int, end_line: int) -> int:
    """Parse ``YYYY-MM-DD HH:MM:SS[.fffffffff]`` into integer nanoseconds since 0001-01-01."""
    m = _TIMESTAMP_RE.match(text.strip())
    if m is None:
        raise TraceError(
            f"bad TIMESTAMP {text!r}: expected 'YYYY-MM-DD HH:MM:SS.fffffff'", path=path, line=line,
            end_line=end_line,
        )
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        when = _dt.datetime(year, month, day, hour, minute, second)
    except ValueError as exc:
        raise TraceError(f"bad TIMESTAMP {text!r}: {exc}", path=path, line=line, end_line=end_line) from None
    frac = m.group(7) or ""
    seconds = when.toordinal() * 86_400 + hour * 3_600 + minute * 60 + second
    return seconds * _NS_PER_S + int(frac.ljust(9, "0") or "0")


def _parse_int(text: str, column: str, *, path: str, line: int, end_line: int) -> int:
    """``[+-]?[0-9]+`` (spaces around it stripped) as an int, else a :class:`TraceError`."""
    if _INT_RE.fullmatch(text.strip()) is None:
        raise TraceError(f"{column} {text!r} is not an integer", path=path, line=line, end_line=end_line)
    return int(text.strip())


def _utf8_lines(f: BinaryIO, *, path: str) -> Iterator[str]:
    """The lines of binary file ``f`` decoded as UTF-8, each with its line ending, a leading
    byte-order mark dropped: what ``open(path, newline="", encoding="utf-8-sig")`` yields, except
    that a byte that is not UTF-8 is a :class:`TraceError` naming its line and byte offset (the
    text reader's UnicodeDecodeError names a position in its read buffer, and no line).

    Lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``, as with ``newline=""`` (no byte of a
    multi-byte UTF-8 character is one of them, so splitting before decoding cuts no character).
    A line is decoded when csv.reader asks for it: bytes after a ``limit`` are not judged.
    """
    offset = 0  # of the line, in bytes from the start of the file
    line = 0
    for chunk in f:  # (ends at a newline byte only)
        for raw in chunk.splitlines(keepends=True):  # (bytes.splitlines: CR LF, CR or LF only)
            line += 1
            start = 3 if line == 1 and raw.startswith(codecs.BOM_UTF8) else 0
            try:
                text = raw[start:].decode("utf-8")
            except UnicodeDecodeError as e:
                at = start + e.start
                column = len(raw[start:at].decode("utf-8")) + 1  # (in characters, as an editor counts)
                raise TraceError(
                    f"byte 0x{raw[at]:02x} at byte offset {offset + at} (column {column}) is not UTF-8 "
                    f"({e.reason}): a trace is a UTF-8 text CSV file",
                    path=path,
                    line=line,
                ) from None
            offset += len(raw)
            if text:  # (a file holding only a byte-order mark is empty)
                yield text


def _next_row(reader: Any, *, path: str) -> list[str] | None:
    """The next record of csv.reader ``reader`` (None at the end), or a :class:`TraceError` for one csv
    cannot read (a field over ``csv.field_size_limit()``), naming the lines it starts and ends on."""
    start = reader.line_num + 1
    try:
        return next(reader, None)
    except csv.Error as e:
        raise TraceError(f"cannot read the row: {e}", path=path, line=start, end_line=reader.line_num) from None


def load_trace(
    path: str | os.PathLike[str] = DEFAULT_TRACE,
    *,
    limit: int | None = None,
    max_model_len: int | None = None,
) -> Trace:
    """Read an Azure LLM trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``) into a :class:`Trace`.

    Args:
        path: the CSV file; defaults to :data:`DEFAULT_TRACE` (the shipped 2,000-request slice).
        limit: keep only the first ``limit`` requests (rows after them are not read, so they are
            not validated either). ``None`` reads the whole file.
        max_model_len: when given, a request with ``prompt_len + output_len > max_model_len``
            (tokens) is clipped: its prompt to at most ``max_model_len - 1`` tokens, then its
            output to what is left (at least 1 token). Clipped requests are counted in
            :attr:`Trace.clipped`. Must be >= 2.

    Returns:
        The trace: request ids are 0-based row indices, arrivals are seconds since the first row.
        A row with ``GeneratedTokens == 0`` becomes ``output_len=1`` (every prefill samples one
        token; the request still costs its whole prefill), counted in :attr:`Trace.zero_output`.
        Blank lines are skipped.

    Raises:
        TraceError: an empty file, a missing or wrong header, a row with the wrong number of
            columns, a count that is not ASCII ``[+-]?[0-9]+``, a prompt length < 1, a negative output length, a
            malformed timestamp, a timestamp earlier than the row before it, or a byte that is not
            UTF-8 (naming its byte offset in the file too). The message names
            the file and the 1-based line number the row starts on (``lines A-B`` for a row whose
            quoted field spans several lines: see :class:`TraceError`).
        ValueError: ``limit < 0`` or ``max_model_len < 2``.
        OSError: the file cannot be opened; zerojit.integrity.NotRegularFileError: it is a FIFO,
            device or socket.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if max_model_len is not None and max_model_len < 2:
        raise ValueError(
            f"max_model_len must be >= 2 (one prompt token and one output token), got {max_model_len}"
        )
    source = os.fspath(path)
    refuse_irregular(source)  # (a FIFO's open would wait for a writer)
    requests: list[TraceRequest] = []
    clipped = 0
    zero_output = 0
    with open(path, "rb") as f:
        reader = csv.reader(_utf8_lines(f, path=source))
        header = _next_row(reader, path=source)
        if header is None:
            raise TraceError(
                f"the file is empty: expected the header {','.join(_HEADER)!r}, then one row per request",
                path=source,
                line=1,
            )
        if tuple(c.strip() for c in header) != _HEADER:
            raise TraceError(
                f"missing or wrong header {header!r}: expected {','.join(_HEADER)!r}",
                path=source,
                line=1,
                end_line=reader.line_num,
            )
        first_ns: int | None = None
        prev_ns: int | None = None
        end = reader.line_num  # the line the record before ends on
        while limit is None or len(requests) < limit:  # (the row after the last is not read)
            row = _next_row(reader, path=source)
            if row is None:
                break
            # A row starts on the line after the record before it (csv.reader yields a blank
            # line as an empty row, so none is skipped unseen): a row whose quoted field holds a
            # line break is named by the line it starts on, with the line it ends on.
            line, end = end + 1, reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(_HEADER):
                raise TraceError(
                    f"expected {len(_HEADER)} columns ({','.join(_HEADER)}), got {len(row)}: {row!r}",
                    path=source, line=line, end_line=end,
                )
            ts_ns = _parse_timestamp_ns(row[0], path=source, line=line, end_line=end)
            prompt_len = _parse_int(row[1], "ContextTokens", path=source, line=line, end_line=end)
            output_len = _parse_int(row[2], "GeneratedTokens", path=source, line=line, end_line=end)
            if prompt_len < 1:
                raise TraceError(
                    f"ContextTokens must be >= 1, got {prompt_len}", path=source, line=line, end_line=end
                )
            if output_len < 0:
                raise TraceError(
                    f"GeneratedTokens must be >= 0, got {output_len}", path=source, line=line, end_line=end
                )
            if prev_ns is not None and ts_ns < prev_ns:
                raise TraceError(
                    f"TIMESTAMP {row[0].strip()!r} is earlier than the row before it "
                    "(a trace must be in arrival order)",
                    path=source, line=line, end_line=end,
                )
            if first_ns is None:
                first_ns = ts_ns
            prev_ns = ts_ns
            if output_len == 0:
                output_len = 1
                zero_output += 1
            if max_model_len is not None and prompt_len + output_len > max_model_len:
                prompt_len = min(prompt_len, max_model_len - 1)
                output_len = max(1, min(output_len, max_model_len - prompt_len))
                clipped += 1
            requests.append(
                TraceRequest(
                    request_id=len(requests),
                    arrival_s=(ts_ns - first_ns) / _NS_PER_S,
                    prompt_len=prompt_len,
                    output_len=output_len,
                )
            )
    return Trace(requests=tuple(requests), source=source, clipped=clipped, zero_output=zero_output)
