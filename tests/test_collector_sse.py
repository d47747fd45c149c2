"""SSE decoding: any split of the byte stream gives the same events; malformed JSON is an error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.protocol.sse import SSEDecoder, SSEError, SSEServerError, event_json, payload_json

STREAM = (
    b": comment\r\n"
    b'data: {"choices":[{"text":"a"}]}\r\n\r\n'
    b'data: {"choices":[{"text":"b\\u00e9"}]}\n\n'
    b'event: x\ndata: {"a":\ndata: 1}\n\n'
    b"data: [DONE]\r\r"
)


def _decode_all(chunks):
    d = SSEDecoder()
    out = []
    for c in chunks:
        out += d.feed(c)
    d.close()
    return out


def test_events_in_one_piece():
    evs = _decode_all([STREAM])
    assert [e.data for e in evs] == ['{"choices":[{"text":"a"}]}', '{"choices":[{"text":"b\\u00e9"}]}',
                                     '{"a":\n1}', "[DONE]"]  # fmt: skip
    assert evs[2].event == "x"
    assert [event_json(e) for e in evs] == [
        {"choices": [{"text": "a"}]},
        {"choices": [{"text": "bé"}]},
        {"a": 1},
        None,
    ]


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12, unique=True))
def test_any_split_gives_the_same_events(cuts):
    cuts = sorted(cuts)
    pieces = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
    assert _decode_all(pieces) == _decode_all([STREAM])


def test_malformed_json_and_non_object_and_error_event():
    d = SSEDecoder()
    (ev,) = d.feed(b'data: {"choices": [\n\n')
    with pytest.raises(SSEError, match="malformed JSON"):
        event_json(ev)
    (ev,) = d.feed(b"data: [1, 2]\n\n")
    with pytest.raises(SSEError, match="not a JSON object"):
        event_json(ev)
    (ev,) = d.feed(b'data: {"error": {"message": "boom"}}\n\n')
    with pytest.raises(SSEServerError, match="boom"):
        event_json(ev)


def test_stream_ending_mid_event_is_cut():
    d = SSEDecoder()
    assert d.feed(b'data: {"a": 1}\n') == []
    with pytest.raises(SSEError, match="middle of an event"):
        d.close()
    d2 = SSEDecoder()
    d2.feed(json.dumps({"a": 1}).encode())
    with pytest.raises(SSEError):
        d2.close()


def _data_all(chunks):
    d = SSEDecoder()
    out = []
    for c in chunks:
        out += d.feed_data(c)
    d.close()
    return out


OPENAI = b"".join(b'data: {"choices":[{"text":"t%d"}]}\n\n' % i for i in range(6)) + b"data: [DONE]\n\n"


@given(st.lists(st.integers(min_value=1, max_value=len(OPENAI) - 1), max_size=12, unique=True),
       st.booleans())  # fmt: skip
def test_fast_path_gives_the_payloads_of_the_general_rules(cuts, general):
    stream = STREAM if general else OPENAI
    cuts = sorted(c for c in cuts if c < len(stream))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert _data_all(pieces) == [e.data.encode() for e in _decode_all([stream])]
    assert payload_json(_data_all([OPENAI])[0]) == {"choices": [{"text": "t0"}]}
    assert payload_json(b"[DONE]") is None


# runs of blank lines (CR, LF, CRLF mixed) between and inside events change nothing
BLANKS = b"\n\r\n\r\r\n\n" + STREAM.replace(b"\r\n\r\n", b"\r\n\r\n\n\n\r\r\n", 1).replace(
    b"\n\n", b"\n\r\n\n", 1
)


@given(st.lists(st.integers(min_value=1, max_value=len(BLANKS) - 1), max_size=12, unique=True))
def test_runs_of_blank_lines_give_the_same_events_under_any_split(cuts):
    cuts = sorted(cuts)
    pieces = [BLANKS[a:b] for a, b in zip([0, *cuts], [*cuts, len(BLANKS)], strict=True)]
    assert _decode_all(pieces) == _decode_all([STREAM])
    assert _data_all(pieces) == [e.data.encode() for e in _decode_all([STREAM])]


def test_a_megabyte_of_blank_lines_decodes_in_linear_time():
    """Issue #20: 128 KiB of blank lines took 3.4 s (each line re-sliced the buffer: quadratic) and held
    the event loop meanwhile; 1 MiB, in one read and in 64 KiB reads, now takes ~0.04 s (bound: 1 s)."""
    import time

    blank = b"\n" * (1 << 20)
    t0 = time.perf_counter()
    assert _data_all([blank + OPENAI]) == _data_all([OPENAI])
    assert _data_all([blank[i : i + 65536] for i in range(0, len(blank), 65536)] + [OPENAI]) == _data_all(
        [OPENAI]
    )
    assert [e.data for e in _decode_all([b"\r\n" * (1 << 19), STREAM])] == [
        e.data for e in _decode_all([STREAM])
    ]
    assert time.perf_counter() - t0 < 1.0


def test_a_line_without_end_is_refused_not_buffered_for_ever():
    d = SSEDecoder()
    with pytest.raises(SSEError, match="longer than"):
        for _ in range(80):
            d.feed_data(b"x" * 65536)
