//! The WebSocket half of the reader: the upgrade with the echo check, the
//! replay check and ack, then every frame checked; a refusal falls back to SSE.

use super::*;

impl SessionReader {
    pub(super) async fn connect_ws(&mut self) -> Result<(), WsRefusal> {
        let prior = self.received().unwrap_or(0);
        let session = self.client.session.clone().unwrap_or_default();
        let base = self.client.url.replacen("http", "ws", 1);
        let url = format!("{base}/session/{session}/events");
        let req = upgrade_request(&url, self.client.token.as_deref(), prior, &session)
            .map_err(WsRefusal::Error)?;
        let tls = tokio_tungstenite::Connector::Rustls(self.client.ws_tls.clone());
        let connecting =
            tokio_tungstenite::connect_async_tls_with_config(req, None, false, Some(tls));
        match connecting.await {
            Ok((mut ws, resp)) => {
                let echo = resp
                    .headers()
                    .get(h::RESUME_CURSOR)
                    .and_then(|v| v.to_str().ok())
                    .map(|s| s.parse::<u64>());
                let echo = match echo {
                    None => None,
                    Some(Ok(c)) => Some(c),
                    Some(Err(_)) => {
                        let _ = ws.close(None).await;
                        return Err(WsRefusal::Fallback(
                            "X-MCP-Resume-Cursor is not a seq".into(),
                        ));
                    }
                };
                match decide_start(prior, echo, None) {
                    Ok(_) => {
                        let c = echo.unwrap_or(prior);
                        let checker = self.checker.get_or_insert_with(|| SeqChecker::new(prior));
                        checker.expect_replay_until(c);
                        self.conn = Some(Conn::Ws(Box::new(ws)));
                        self.maybe_ack().await.map_err(WsRefusal::Error)?;
                        Ok(())
                    }
                    Err(d) => {
                        // Not resumable: close at once, read nothing from it.
                        let _ = ws.close(None).await;
                        Err(WsRefusal::Fallback(d.to_string()))
                    }
                }
            }
            Err(tungstenite::Error::Http(resp)) => {
                let status = resp.status().as_u16();
                let body = resp
                    .body()
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default();
                match status {
                    426 | 503 => Err(WsRefusal::Fallback(format!(
                        "the upgrade was answered {status}"
                    ))),
                    _ => Err(WsRefusal::Error(
                        self.with_prior(status_error(status, &body)),
                    )),
                }
            }
            Err(e) => Err(WsRefusal::Error(match tls_cause(&e) {
                Some(tls) => ClientError::Tls(tls),
                None => ClientError::Transport(e.to_string()),
            })),
        }
    }

    pub(super) async fn maybe_ack(&mut self) -> Result<(), ClientError> {
        let Some(c) = self.checker.as_ref().and_then(SeqChecker::ack_due) else {
            return Ok(());
        };
        let Some(Conn::Ws(ws)) = self.conn.as_mut() else {
            return Ok(());
        };
        ws.send(Message::Text(
            ClientFrame::CursorAck { cursor: c }.encode().into(),
        ))
        .await
        .map_err(|e| ClientError::Transport(e.to_string()))?;
        if let Some(ch) = self.checker.as_mut() {
            ch.acked();
        }
        Ok(())
    }

    pub(super) async fn read_ws(&mut self) -> Result<(), ClientError> {
        let Some(Conn::Ws(ws)) = self.conn.as_mut() else {
            return Ok(());
        };
        let msg = match ws.next().await {
            Some(Ok(m)) => m,
            Some(Err(e)) => return Err(ClientError::Transport(e.to_string())),
            None => return Err(ClientError::Transport("the WebSocket ended".into())),
        };
        match msg {
            Message::Text(text) => {
                let frame = ServerFrame::parse(text.as_str())
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                let checker = self
                    .checker
                    .as_mut()
                    .ok_or_else(|| ClientError::Protocol("no cursor".into()))?;
                let result = match &frame {
                    ServerFrame::Event { seq, .. } => checker.on_event(*seq),
                    ServerFrame::Heartbeat { head } => checker.on_heartbeat(*head),
                    // Only sent to a client that offered it; this one reads the 101's echo.
                    ServerFrame::Cursor { .. } => Ok(()),
                };
                if let Err(d) = result {
                    let reason = d.to_string();
                    let _ = ws
                        .send(Message::Close(Some(CloseFrame {
                            code: CloseCode::from(close::CURSOR_MISMATCH),
                            reason: reason.into(),
                        })))
                        .await;
                    self.conn = None;
                    return Err(ClientError::Discontinuity(d));
                }
                if let ServerFrame::Event { seq, message } = frame {
                    let message: Value = serde_json::from_str(message.get())
                        .map_err(|e| ClientError::Protocol(e.to_string()))?;
                    self.pending.push_back(ReadEvent {
                        seq: Some(seq),
                        id: seq.to_string(),
                        message,
                    });
                    self.maybe_ack().await?;
                }
                Ok(())
            }
            Message::Close(frame) => {
                let code = frame
                    .as_ref()
                    .map(|f| u16::from(f.code))
                    .unwrap_or(close::GOING_AWAY);
                let reason = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                self.conn = None;
                match close::advice(code) {
                    CloseAdvice::Resume | CloseAdvice::Done => Err(ClientError::Transport(
                        format!("WebSocket closed {code} {reason}; resuming"),
                    )),
                    CloseAdvice::Reinitialise => Err(ClientError::SessionGone),
                    CloseAdvice::Fatal => Err(ClientError::Protocol(format!(
                        "WebSocket closed {code}: {reason}"
                    ))),
                }
            }
            _ => Ok(()),
        }
    }
}

pub(super) enum WsRefusal {
    /// Resume over SSE from the same cursor.
    Fallback(String),
    /// Report to the application.
    Error(ClientError),
}
