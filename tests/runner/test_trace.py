"""Reading the Azure LLM trace: real rows, malformed rows, clipping."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerojit.runner.trace import DEFAULT_TRACE, Trace, TraceError, TraceRequest, load_trace

SHARED_TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "azure_llm_trace_conv_2023.csv"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


# ---------------------------------------------------------------- the shipped slice
def test_first_three_rows_of_the_shipped_slice():
    # From the file by hand:
    #   2023-11-16 18:15:46.6805900,374,44
    #   2023-11-16 18:15:50.9951690,396,109
    #   2023-11-16 18:15:51.2224670,879,55
    trace = load_trace(limit=3)
    assert [(r.request_id, r.prompt_len, r.output_len) for r in trace] == [
        (0, 374, 44),
        (1, 396, 109),
        (2, 879, 55),
    ]
    assert trace[0].arrival_s == 0.0
    assert trace[1].arrival_s == pytest.approx(4.3145790, abs=1e-9)
    assert trace[2].arrival_s == pytest.approx(4.5418770, abs=1e-9)
    assert trace.source == str(DEFAULT_TRACE)
    assert (trace.clipped, trace.zero_output) == (0, 0)
    assert trace.total_prompt_tokens == 374 + 396 + 879
    assert trace.total_output_tokens == 44 + 109 + 55
    assert trace.total_tokens == 374 + 396 + 879 + 44 + 109 + 55
    assert (trace.max_prompt_len, trace.max_output_len, trace.max_total_len) == (879, 109, 934)


def test_whole_shipped_slice():
    trace = load_trace()
    assert len(trace) == trace.num_requests == 2000
    # last row: 2023-11-16 18:22:50.9400470,424,96
    last = trace[-1]
    assert (last.request_id, last.prompt_len, last.output_len) == (1999, 424, 96)
    assert last.arrival_s == pytest.approx(424.2594570, abs=1e-9)
    assert trace.duration_s == last.arrival_s
    arrivals = [r.arrival_s for r in trace]
    assert arrivals == sorted(arrivals)
    assert all(r.prompt_len >= 1 and r.output_len >= 1 for r in trace)


def test_shipped_slice_is_a_verbatim_prefix_with_attribution():
    readme = (DEFAULT_TRACE.parent / "README.md").read_text()
    for needle in ("CC-BY 4.0", "Splitwise", "Patel", "ISCA 2024", "first 2,000"):
        assert needle in readme
    if not SHARED_TRACE.exists():
        pytest.skip("the full trace is not beside the repository")
    shipped = DEFAULT_TRACE.read_bytes().splitlines(keepends=True)
    full = SHARED_TRACE.read_bytes().splitlines(keepends=True)
    assert len(shipped) == 2001
    assert shipped == full[:2001]


def test_limit_takes_the_first_requests():
    assert load_trace(limit=10).requests == load_trace().requests[:10]
    assert len(load_trace(limit=0)) == 0
    with pytest.raises(ValueError, match="limit"):
        load_trace(limit=-1)


# ---------------------------------------------------------------- parsing details
def test_lf_and_crlf_fractions_and_blank_lines(tmp_path):
    text = (
        HEADER
        + "2023-11-16 18:15:46.6805900,10,2\r\n"
        + "\n"
        + "2023-11-16 18:15:46.6805901,20,3\n"  # 100 ns later: 7 digits kept exactly
        + "2023-11-16 18:15:47,30,4\n"  # no fraction
        + "2023-11-17 00:00:00.000000001,40,5\n"  # 9 digits, next day
    )
    trace = load_trace(write(tmp_path, text))
    assert [r.prompt_len for r in trace] == [10, 20, 30, 40]
    assert [r.request_id for r in trace] == [0, 1, 2, 3]
    assert trace[1].arrival_s == pytest.approx(1e-7, abs=1e-12)
    assert trace[2].arrival_s == pytest.approx(0.31941, abs=1e-9)
    # 18:15:46.68059 -> midnight: 5 h 44 min 13.31941 s, plus 1 ns
    assert trace[3].arrival_s == pytest.approx(5 * 3600 + 44 * 60 + 13.319410001, abs=1e-9)


def test_zero_generated_tokens_becomes_one_and_is_counted(tmp_path):
    text = HEADER + "2023-11-16 18:15:46.0,10,0\n2023-11-16 18:15:47.0,10,5\n"
    trace = load_trace(write(tmp_path, text))
    assert [r.output_len for r in trace] == [1, 5]
    assert trace.zero_output == 1


def test_clipping_to_max_model_len_is_counted(tmp_path):
    text = HEADER + "".join(
        f"2023-11-16 18:15:{46 + i}.0,{p},{o}\n"
        for i, (p, o) in enumerate([(100, 50), (200, 10), (50, 50), (119, 1), (120, 1)])
    )
    trace = load_trace(write(tmp_path, text), max_model_len=120)
    assert [(r.prompt_len, r.output_len) for r in trace] == [
        (100, 20),  # output clipped to fit
        (119, 1),  # prompt clipped to max_model_len - 1, output to the one token left
        (50, 50),  # fits
        (119, 1),  # fits exactly
        (119, 1),  # 121 > 120
    ]
    assert trace.clipped == 3
    assert all(r.total_len <= 120 for r in trace)
    assert load_trace(write(tmp_path, text)).clipped == 0
    with pytest.raises(ValueError, match="max_model_len"):
        load_trace(write(tmp_path, text), max_model_len=1)


def test_clipping_the_real_slice():
    trace = load_trace(limit=200, max_model_len=4096)
    unclipped = load_trace(limit=200)
    assert trace.clipped == sum(r.total_len > 4096 for r in unclipped) > 0
    assert trace.max_total_len <= 4096
    for a, b in zip(trace, unclipped):
        if b.total_len <= 4096:
            assert a == b


# ---------------------------------------------------------------- malformed rows
GOOD = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    "bad_row, line, match",
    [
        ("2023-11-16 18:15:47.0,374\n", 3, "expected 3 columns"),
        ("2023-11-16 18:15:47.0,374,44,1\n", 3, "expected 3 columns"),
        ("2023-11-16 18:15:47.0,abc,44\n", 3, "ContextTokens 'abc' is not an integer"),
        ("2023-11-16 18:15:47.0,374,4.5\n", 3, "GeneratedTokens '4.5' is not an integer"),
        # only ASCII [+-]?[0-9]+: int() would take these
        ("2023-11-16 18:15:47.0,1_000,44\n", 3, "ContextTokens '1_000' is not an integer"),
        ("2023-11-16 18:15:47.0,374,\u0664\u0664\n", 3, "GeneratedTokens '\u0664\u0664' is not an integer"),
        ("2023-11-16 18:15:47.0,\uff13\uff17\uff14,44\n", 3, "ContextTokens '\uff13\uff17\uff14' is not an integer"),
        ("2023-11-16 18:15:47.0,374,+ 4\n", 3, "GeneratedTokens '\\+ 4' is not an integer"),
        ("2023-11-16 18:15:47.0,0,44\n", 3, "ContextTokens must be >= 1"),
        ("2023-11-16 18:15:47.0,-3,44\n", 3, "ContextTokens must be >= 1"),
        ("2023-11-16 18:15:47.0,374,-1\n", 3, "GeneratedTokens must be >= 0"),
        ("yesterday,374,44\n", 3, "bad TIMESTAMP"),
        ("2023-13-16 18:15:47.0,374,44\n", 3, "bad TIMESTAMP"),
        ("2023-11-16 18:15:47.1234567890,374,44\n", 3, "bad TIMESTAMP"),
        ("2023-11-16 18:15:\u0664\u0667.0,374,44\n", 3, "bad TIMESTAMP"),  # ASCII digits only, as the counts
        ("2023-11-16 18:15:45.0,374,44\n", 3, "earlier than the row before"),
        ("\n" + "2023-11-16 18:15:47.0,374\n", 4, "expected 3 columns"),  # blank lines count
    ],
)
def test_malformed_row_names_file_and_line(tmp_path, bad_row, line, match):
    path = write(tmp_path, HEADER + GOOD + bad_row + GOOD.replace("46.68", "59.68"))
    with pytest.raises(TraceError, match=match) as info:
        load_trace(path)
    assert info.value.line == line
    assert info.value.path == str(path)
    assert f"{path}, line {line}:" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "bad_rows, lines, match",
    [
        ('2023-11-16 18:15:47.0,"3\n7\n4",44\n', (3, 5), r"ContextTokens '3\\n7\\n4' is not an integer"),
        ('"2023-11-16\n18:15:47.0",374,44\n', (3, 4), "bad TIMESTAMP"),
        ('2023-11-16 18:15:47.0,374,"44\n\n",1\n', (3, 5), "expected 3 columns"),
        (GOOD + '2023-11-16 18:15:47.0,"3\r\n7",4\r\n', (4, 5), "ContextTokens"),  # CRLF, after a good row
    ],
)
def test_a_row_spanning_lines_is_named_by_the_lines_it_starts_and_ends_on(tmp_path, bad_rows, lines, match):
    """A quoted field with line breaks: the row is named where it starts (csv.reader's line_num is
    where it ends), with the line it ends on."""
    path = write(tmp_path, HEADER + GOOD + bad_rows + GOOD.replace("46.68", "59.68"))
    with pytest.raises(TraceError, match=match) as info:
        load_trace(path)
    start, end = lines
    assert (info.value.line, info.value.end_line) == (start, end)
    assert f"{path}, lines {start}-{end}:" in str(info.value)
    assert len(str(info.value).splitlines()) == 1  # (the field's line breaks are escaped)


def test_a_field_csv_cannot_read_is_a_trace_error_naming_its_line(tmp_path):
    path = write(tmp_path, HEADER + GOOD + '2023-11-16 18:15:47.0,"' + "3" * 200_000 + '",44\n')
    with pytest.raises(TraceError, match="cannot read the row: field larger than field limit") as info:
        load_trace(path)
    assert info.value.line == 3 and f"{path}, line 3:" in str(info.value)


def test_rows_after_a_row_spanning_lines_keep_their_own_line(tmp_path):
    path = write(tmp_path, HEADER + GOOD + '2023-11-16 18:15:47.0,"374\n",44\n' + "\n" + "garbage\n")
    with pytest.raises(TraceError, match="expected 3 columns") as info:
        load_trace(path)  # lines 3-4 a good row with a line break in a count, 5 blank, 6 the bad one
    assert (info.value.line, info.value.end_line) == (6, 6) and f"{path}, line 6:" in str(info.value)


@pytest.mark.parametrize("text", ["", GOOD, "time,prompt,output\n" + GOOD, "TIMESTAMP,ContextTokens\n"])
def test_missing_or_wrong_header_is_line_1(tmp_path, text):
    with pytest.raises(TraceError, match="header") as info:
        load_trace(write(tmp_path, text))
    assert info.value.line == 1


@pytest.mark.parametrize("text", ["", "\ufeff"])  # nothing, or only a UTF-8 byte-order mark
def test_an_empty_file_is_named_empty(tmp_path, text):
    path = write(tmp_path, text, name="empty.csv")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}, line 1: the file is empty")
    assert "TIMESTAMP,ContextTokens,GeneratedTokens" in msg
    assert "None" not in msg
    assert (info.value.path, info.value.line) == (str(path), 1)


def bad_byte_on_line_50(tmp_path: Path, bom: bool = False) -> tuple[Path, int]:
    """A trace whose line 50 (row 49, ContextTokens) holds byte 0xff, far past the text reader's
    first buffer; and that byte's offset in the file."""
    rows = [f"2023-11-16 18:15:{i // 100:02d}.{i % 100:02d},{100 + i},44\r\n".encode() for i in range(49)]
    rows[48] = rows[48].replace(b",148,", b",1\xff48,")
    data = (b"\xef\xbb\xbf" if bom else b"") + HEADER.encode() + b"".join(rows) + b"x" * 20_000 + b"\n"
    path = tmp_path / "latin.csv"
    path.write_bytes(data)
    return path, data.index(b"\xff")


@pytest.mark.parametrize("bom", [False, True])
def test_a_byte_that_is_not_utf8_is_named_by_line_and_byte_offset(tmp_path, bom):
    path, offset = bad_byte_on_line_50(tmp_path, bom)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert (info.value.path, info.value.line) == (str(path), 50)
    assert str(info.value) == (f"{path}, line 50: byte 0xff at byte offset {offset} (column 25) is not UTF-8 "
                               "(invalid start byte): a trace is a UTF-8 text CSV file")
    assert len(load_trace(path, limit=48)) == 48  # bytes after the limit are not judged


def test_byte_order_mark_lone_cr_and_multibyte_text_read_as_before(tmp_path):
    text = "\ufeff" + HEADER + "2023-11-16 18:15:46.0,10,2\r2023-11-16 18:15:47.0,20,3\r\n"
    assert [r.prompt_len for r in load_trace(write(tmp_path, text))] == [10, 20]
    with pytest.raises(TraceError, match="line 3: ContextTokens '\u0664' is not an integer"):
        load_trace(write(tmp_path, HEADER + GOOD + "2023-11-16 18:15:47.0,\u0664,3\n"))


def test_rows_after_the_limit_are_not_read(tmp_path):
    path = write(tmp_path, HEADER + GOOD + "garbage\n")
    assert len(load_trace(path, limit=1)) == 1
    with pytest.raises(TraceError):
        load_trace(path)


def test_values_are_frozen():
    req = TraceRequest(0, 0.0, 1, 1)
    with pytest.raises(AttributeError):
        req.prompt_len = 2  # type: ignore[misc]
    assert Trace((req,), "x").total_tokens == 2
