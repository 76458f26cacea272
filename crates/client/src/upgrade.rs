//! The WebSocket upgrade request of the session stream (docs/protocol.md 5):
//! subprotocol, cursor, session, and where the bearer token may travel.

use mcp_resume_proto::{headers as h, SUBPROTOCOL};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;

use crate::ClientError;

/// The upgrade request of the session stream. The bearer token rides in the
/// subprotocol (`mcp.auth.TOKEN`, docs/protocol.md) only over `wss://`: over
/// plain `ws://` it goes in `Authorization` alone, so no proxy or log that
/// records subprotocols sees it in the clear.
pub(crate) fn upgrade_request(
    url: &str,
    token: Option<&str>,
    prior: u64,
    session: &str,
) -> Result<Request, ClientError> {
    let mut req = url
        .into_client_request()
        .map_err(|e| ClientError::Usage(e.to_string()))?;
    let secure = req.uri().scheme_str() == Some("wss");
    let mut protocols = SUBPROTOCOL.to_owned();
    let mut authorization = None;
    if let Some(t) = token {
        if secure {
            protocols.push_str(&format!(
                ", {}{t}",
                mcp_resume_proto::AUTH_SUBPROTOCOL_PREFIX
            ));
        } else {
            authorization = Some(format!("Bearer {t}"));
        }
    }
    let val = |s: &str| {
        s.parse()
            .map_err(|_| ClientError::Usage(format!("bad header value {s:?}")))
    };
    let hd = req.headers_mut();
    hd.insert("sec-websocket-protocol", val(&protocols)?);
    hd.insert(h::LAST_EVENT_ID, val(&prior.to_string())?);
    hd.insert(h::MCP_SESSION_ID, val(session)?);
    if let Some(a) = authorization {
        hd.insert("authorization", val(&a)?);
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::upgrade_request;

    fn header(
        req: &tokio_tungstenite::tungstenite::handshake::client::Request,
        name: &str,
    ) -> Option<String> {
        req.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    #[test]
    fn the_token_rides_in_the_subprotocol_only_over_wss() {
        let req = upgrade_request("ws://h/mcp/session/s/events", Some("s3cret"), 4, "s").unwrap();
        assert_eq!(
            header(&req, "sec-websocket-protocol").as_deref(),
            Some("mcp.resume.v1")
        );
        assert_eq!(
            header(&req, "authorization").as_deref(),
            Some("Bearer s3cret")
        );
        assert_eq!(header(&req, "last-event-id").as_deref(), Some("4"));

        let req = upgrade_request("wss://h/mcp/session/s/events", Some("s3cret"), 4, "s").unwrap();
        assert_eq!(
            header(&req, "sec-websocket-protocol").as_deref(),
            Some("mcp.resume.v1, mcp.auth.s3cret")
        );
        assert_eq!(header(&req, "authorization"), None);

        let req = upgrade_request("wss://h/mcp/session/s/events", None, 0, "s").unwrap();
        assert_eq!(
            header(&req, "sec-websocket-protocol").as_deref(),
            Some("mcp.resume.v1")
        );
        assert_eq!(header(&req, "authorization"), None);
    }
}
