//! The routing table's keys: a JSON-RPC id (or progress token) as its JSON
//! text, so that `1` and `"1"` are different calls, as JSON-RPC says.

use serde_json::Value;

/// The key of a JSON-RPC id (or progress token): its JSON text, so `1` and
/// `"1"` differ as JSON-RPC says they do.
///
/// Written by serde_json's serializer straight into the string: `Display`
/// (`to_string`) gives the same text through `fmt`'s adapter, at twice the
/// instructions, and every call's key is written when it is registered.
pub(crate) fn key(id: &Value) -> String {
    let mut text = Vec::with_capacity(24);
    serde_json::to_writer(&mut text, id).expect("a JSON value always serializes");
    String::from_utf8(text).expect("serde_json writes UTF-8")
}

/// [`key`] for a lookup: written on the stack when it fits (any number,
/// most strings), so that finding a call allocates nothing.
pub(super) enum Lookup {
    Stack([u8; 48], usize),
    Heap(String),
}

impl Lookup {
    pub(super) fn of(id: &Value) -> Self {
        let mut buf = [0u8; 48];
        let (written, left) = {
            let mut w: &mut [u8] = &mut buf;
            // Fails only when the text does not fit.
            let written = serde_json::to_writer(&mut w, id).is_ok();
            (written, w.len())
        };
        if written {
            Self::Stack(buf, buf.len() - left)
        } else {
            Self::Heap(key(id))
        }
    }

    pub(super) fn as_str(&self) -> &str {
        match self {
            Self::Stack(buf, n) => {
                std::str::from_utf8(&buf[..*n]).expect("serde_json writes UTF-8")
            }
            Self::Heap(k) => k,
        }
    }
}
