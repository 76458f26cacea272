//! The checks of a stateless-era POST's standard headers against its body
//! (crates/proto/src/meta.rs, SEP-2243: `Mcp-Method`, `Mcp-Name` and the
//! `=?base64?…?=` form of a name that is not plain ASCII):
//!
//! - any header value decodes without a panic; a value in the Base64 form
//!   decodes only when its Base64 is the one canonical spelling of the text;
//! - any text, Base64-wrapped, decodes to itself;
//! - headers derived from a body pass its check, plain (padded with the
//!   whitespace RFC 9110 lets around a value) or Base64-wrapped; a changed
//!   or missing one is refused;
//! - on any JSON body and any header, a check that passes means every
//!   derived header decodes to the body's value.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use mcp_resume_proto::meta::{
    check_standard_headers, decode_header_value, standard_headers, PROTOCOL_VERSION,
};
use serde_json::json;

#[derive(Arbitrary, Debug)]
enum Form {
    Plain,
    Padded(u8),
    Base64,
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Any header value, as it came.
    value: String,
    /// The inside of a value in the Base64 form, from the Base64 alphabet and `=`.
    inside: Vec<u8>,
    /// The body's method, by index into METHODS or its own.
    method: Result<u8, String>,
    name: String,
    version: String,
    forms: [Form; 3],
    /// Which derived header to change or drop (by index).
    spoil: Option<(u8, bool)>,
    /// Any body.
    body: Vec<u8>,
}

const METHODS: &[&str] = &[
    "tools/call",
    "prompts/get",
    "resources/read",
    "tasks/get",
    "tasks/stream",
    "tools/list",
];

/// Standard Base64 with padding (RFC 4648 section 4), written here apart from the decoder under test.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn wrapped(text: &str) -> String {
    format!("=?base64?{}?=", base64(text.as_bytes()))
}

/// Whether a value written as is reads back as itself: no whitespace the
/// check takes off, and not itself in the Base64 form.
fn plain_ok(v: &str) -> bool {
    v.trim_matches([' ', '\t']) == v
        && !(v.starts_with("=?base64?") && v.ends_with("?=") && v.len() >= 11)
}

/// Decodes `value` without a panic; the Base64 form only canonically.
fn decodes_canonically(value: &str) {
    match decode_header_value(value) {
        Some(text) => match value
            .strip_prefix("=?base64?")
            .and_then(|v| v.strip_suffix("?="))
        {
            Some(b64) => assert_eq!(
                base64(text.as_bytes()),
                b64,
                "a second spelling of {text:?} decoded"
            ),
            None => assert_eq!(text, value),
        },
        None => assert!(value.starts_with("=?base64?") && value.ends_with("?=")),
    }
}

fuzz_target!(|input: Input| {
    decodes_canonically(&input.value);
    const ALPHABET: &[u8; 65] =
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
    let inside: String = input
        .inside
        .iter()
        .map(|&b| ALPHABET[b as usize % 65] as char)
        .collect();
    decodes_canonically(&format!("=?base64?{inside}?="));

    // Any text, wrapped, is itself.
    assert_eq!(
        decode_header_value(&wrapped(&input.name)).as_deref(),
        Some(input.name.as_str())
    );

    // Headers derived from a body pass its check.
    let method = match &input.method {
        Ok(i) => METHODS[*i as usize % METHODS.len()].to_owned(),
        Err(m) => m.clone(),
    };
    let key = if method == "resources/read" {
        "uri"
    } else if method.starts_with("tasks/") {
        "taskId"
    } else {
        "name"
    };
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": method,
        "params": {key: input.name, "_meta": {PROTOCOL_VERSION: input.version}}});
    let derived = standard_headers(&message);
    assert!(
        derived.len() >= 2,
        "a stateless body derives at least its version and method"
    );
    let mut sent: Vec<(&str, String)> = Vec::new();
    let mut expect_ok = true;
    for (i, (name, value)) in derived.iter().enumerate() {
        let v = match &input.forms[i % 3] {
            Form::Plain => {
                expect_ok &= plain_ok(value);
                value.clone()
            }
            Form::Padded(p) => {
                expect_ok &= plain_ok(value);
                let ws = |n: u8| ["", " ", "\t", " \t "][n as usize % 4];
                format!("{}{value}{}", ws(*p), ws(*p >> 2))
            }
            Form::Base64 => wrapped(value),
        };
        sent.push((name, v));
    }
    if let Some((which, drop)) = input.spoil {
        let i = which as usize % sent.len();
        if drop {
            sent.remove(i);
        } else {
            let other = format!("{}x", derived[i].1);
            sent[i].1 = wrapped(&other);
        }
        expect_ok = false;
    }
    let header = |n: &str| sent.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
    let verdict = check_standard_headers(header, &message);
    if expect_ok {
        assert!(verdict.is_ok(), "{verdict:?} for {sent:?}");
    }
    if input.spoil.is_some() {
        assert!(
            verdict.is_err(),
            "a changed or missing header passed: {sent:?}"
        );
    }

    // Any body, every header the same value: a pass means every derived one decodes to its value.
    if let Ok(body) = serde_json::from_slice::<serde_json::Value>(&input.body) {
        let header = |_: &str| Some(input.value.as_str());
        if check_standard_headers(header, &body).is_ok() {
            for (_, want) in standard_headers(&body) {
                let got = decode_header_value(input.value.trim_matches([' ', '\t']));
                assert_eq!(got.as_deref(), Some(want.as_str()));
            }
        }
    }
});
