"""The wire rules in isolation: SSE blocks (priming events, CR/LF splits, the closing
comment), event ids, the seq check and the upgrade decision, the frame reader."""

from __future__ import annotations

import pytest

from mcp_resume_client.errors import CursorDiscontinuityError, ProtocolViolationError
from mcp_resume_client.seq import SeqChecker, decide_start, parse_request_id, parse_seq
from mcp_resume_client.sse import SseParser
from mcp_resume_client.upgrade import parse_frame, ws_url


def test_sse_blocks_split_anywhere_are_the_same() -> None:
    stream = b"id: 3\r\nretry: 1000\r\ndata:\r\n\r\nid: 4\nevent: message\ndata: {\"a\":\ndata: 1}\n\n: error log-gap: x\n"
    whole = SseParser()
    events = whole.feed(stream)
    for cut in range(len(stream)):
        p = SseParser()
        got = p.feed(stream[:cut]) + p.feed(stream[cut:])
        assert [(e.id, e.event, e.data, e.retry) for e in got] == [(e.id, e.event, e.data, e.retry) for e in events]
    assert [(e.id, e.data, e.retry) for e in events] == [("3", b"", 1000), ("4", b'{"a":\n1}', None)]
    assert whole.ending == "log-gap: x"


def test_event_ids() -> None:
    assert parse_seq("0") == 0 and parse_seq("47") == 47
    assert parse_seq("047") is None and parse_seq("-1") is None and parse_seq("+1") is None
    assert parse_seq(str(2**64)) is None and parse_seq(str(2**64 - 1)) == 2**64 - 1
    assert parse_request_id("7/3") == (7, 3)
    assert parse_request_id("0/1") is None and parse_request_id("7") is None and parse_request_id("7/03") is None


def test_the_seq_check_refuses_gaps_duplicates_and_gate_breaches() -> None:
    c = SeqChecker(5)
    assert c.on_event(7) is not None and c.last == 5
    assert c.on_event(5) is not None and c.last == 5
    assert c.on_event(6) is None and c.last == 6
    c.expect_replay_until(7)
    assert c.ack_due() is None
    assert c.on_event(7) is None and c.ack_due() == 7
    assert c.on_event(8) is not None, "above C before the ack"
    c.acked()
    assert c.on_event(8) is None
    assert c.on_heartbeat(8) is None and c.on_heartbeat(9) is not None


def test_the_upgrade_decision() -> None:
    assert decide_start(5, "7").committed == 7
    assert decide_start(5, "5").committed == 5
    assert decide_start(5, None).why == "missing-echo"
    assert decide_start(5, "x").why == "missing-echo"
    assert decide_start(5, "4").why == "echo-below-prior"


def test_frames() -> None:
    f = parse_frame('{"type":"event","seq":12,"message":{"jsonrpc":"2.0","method":"m"}}')
    assert (f.kind, f.number, f.message_json) == ("event", 12, '{"jsonrpc":"2.0","method":"m"}')
    f = parse_frame('{"seq":12,"type":"event","message":{"jsonrpc":"2.0","method":"m"}}')
    assert (f.kind, f.number, f.message) == ("event", 12, {"jsonrpc": "2.0", "method": "m"})
    assert parse_frame('{"type":"heartbeat","head":9}').number == 9
    for bad in ("nope", "[]", '{"type":"event","seq":"1","message":{}}', '{"type":"heartbeat"}', b"{}"):
        with pytest.raises(ProtocolViolationError):
            parse_frame(bad)


def test_urls() -> None:
    assert ws_url("http://h:1/mcp", "session/x/events") == "ws://h:1/mcp/session/x/events"
    assert ws_url("https://h/mcp/?a=1", "tasks/t/events") == "wss://h/mcp/tasks/t/events?a=1"


def test_a_409_body_becomes_the_typed_error() -> None:
    body = b'{"error":"cursor-discontinuity","message":"m","reason":"data-lost","cursor":4,"resume-cursor":9,"head":12,"floor":1,"lost-from":5,"lost-to":9}'
    e = CursorDiscontinuityError.from_body(body, 0, "session")
    assert (e.reason, e.cursor, e.head, e.floor, e.resume_cursor, e.lost_from, e.lost_to) == (
        "data-lost", 4, 12, 1, 9, 5, 9
    )
    assert CursorDiscontinuityError.from_body(b"not json", 3, "session").cursor == 3


def test_an_event_over_the_limit_is_refused() -> None:
    p = SseParser(max_event_size=10)
    assert p.feed(b"data: 0123456789\n\n")[0].data == b"0123456789"
    with pytest.raises(ProtocolViolationError):
        p.feed(b"data: 0123456789\ndata: x\n\n")
    with pytest.raises(ProtocolViolationError):
        SseParser(max_event_size=10).feed(b"data: 01234567890123")
