//! The SSE codec of crates/proto/src/sse.rs, which every SSE reader (the
//! client's, the gateway's) feeds bytes as they arrive:
//!
//! - any bytes, cut into any chunks (empty ones too), parse to the same
//!   events and the same ending comment as the same bytes fed at once;
//! - what the encoder writes (events with any id, event name and data,
//!   priming events, keepalives, ending comments), cut anywhere, parses back
//!   to exactly those events, in order, and the last ending.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use mcp_resume_proto::sse::{encode, ending, priming, SseEvent, SseParser, KEEPALIVE};

#[derive(Arbitrary, Debug)]
enum Piece {
    Event {
        id: Option<String>,
        event: Option<String>,
        data: String,
    },
    Priming {
        id: String,
        retry: u64,
    },
    Keepalive,
    Ending {
        code: String,
        why: String,
    },
}

#[derive(Arbitrary, Debug)]
enum Input {
    Raw { bytes: Vec<u8>, cuts: Vec<u16> },
    Encoded { pieces: Vec<Piece>, cuts: Vec<u16> },
}

/// `bytes` cut at the sizes `cuts` names (0 is an empty chunk), the rest in one.
fn chunks<'a>(bytes: &'a [u8], cuts: &[u16]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    for &c in cuts {
        let n = (c as usize % 257).min(rest.len());
        out.push(&rest[..n]);
        rest = &rest[n..];
    }
    out.push(rest);
    out
}

fn parse(chunks: &[&[u8]]) -> (Vec<SseEvent>, Option<String>) {
    let mut p = SseParser::new();
    let events = chunks.iter().flat_map(|c| p.feed(c)).collect();
    (events, p.take_ending())
}

/// A field value the encoder can write on one line: no line breaks (and,
/// for an id, no NUL, which makes a reader ignore the id).
fn one_line(s: &str, nul_too: bool) -> String {
    s.chars()
        .filter(|&c| c != '\n' && c != '\r' && !(nul_too && c == '\0'))
        .collect()
}

fuzz_target!(|input: Input| {
    match input {
        Input::Raw { bytes, cuts } => {
            let whole = parse(&[&bytes]);
            let cut = parse(&chunks(&bytes, &cuts));
            assert_eq!(whole, cut, "the same bytes in other chunks parse otherwise");
            let lines = bytes.iter().filter(|&&b| b == b'\n').count();
            // An event takes a field line and a blank line.
            assert!(whole.0.len() <= lines / 2);
        }
        Input::Encoded { pieces, cuts } => {
            let mut wire = Vec::new();
            let mut want = Vec::new();
            let mut want_ending = None;
            for piece in pieces {
                match piece {
                    Piece::Event { id, event, data } => {
                        let id = id.map(|s| one_line(&s, true));
                        let event = event.map(|s| one_line(&s, false));
                        // A `\r` only as part of a line break (`\r\n`, or
                        // last, which the encoder drops): this parser, unlike
                        // WHATWG's, does not end a line at a lone `\r`.
                        let data: String = data
                            .char_indices()
                            .filter(|&(i, c)| {
                                c != '\r' || data[i + 1..].starts_with('\n') || i + 1 == data.len()
                            })
                            .map(|(_, c)| c)
                            .collect();
                        encode(&mut wire, id.as_deref(), event.as_deref(), data.as_bytes());
                        want.push(SseEvent {
                            id,
                            event,
                            data: {
                                let d = data.replace("\r\n", "\n");
                                d.strip_suffix('\r').map_or(d.clone(), str::to_owned)
                            },
                            retry: None,
                        });
                    }
                    Piece::Priming { id, retry } => {
                        let id = one_line(&id, true);
                        wire.extend_from_slice(&priming(&id, retry.into()));
                        want.push(SseEvent {
                            id: Some(id),
                            event: None,
                            data: String::new(),
                            retry: Some(retry),
                        });
                    }
                    Piece::Keepalive => wire.extend_from_slice(KEEPALIVE),
                    Piece::Ending { code, why } => {
                        let code = one_line(&code, false);
                        wire.extend_from_slice(&ending(&code, &why));
                        want_ending = Some(format!("{code}: {}", why.replace(['\n', '\r'], " ")));
                    }
                }
            }
            let (got, got_ending) = parse(&chunks(&wire, &cuts));
            assert_eq!(got, want, "the encoder's events do not parse back");
            assert_eq!(got_ending, want_ending);
        }
    }
});
