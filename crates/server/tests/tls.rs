//! HTTPS and WSS end to end, with a CA and a server certificate made at
//! test time: the client that trusts the CA does everything it does over
//! plain HTTP; one that does not is refused with a certificate error.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{next_frame, Frame, TestServer};
use mcp_resume_client::{ClientError, McpClient, ReaderOptions, TlsError, Transport};
use mcp_resume_server::{tls_config, ListenError, ServerConfig};
use mcp_resume_testkit::TestPki;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

async fn tls_server(pki: &TestPki) -> TestServer {
    let mut config = ServerConfig::default();
    config.tls = Some(tls_config(&pki.cert, &pki.key).expect("a TLS configuration"));
    let mut s = TestServer::start(config).await;
    s.url = s.url.replacen("http://", "https://", 1);
    s
}

#[tokio::test]
async fn a_client_trusting_the_ca_initializes_calls_reads_sse_and_upgrades_to_wss() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::create(dir.path());
    let s = tls_server(&pki).await;

    let mut client = McpClient::new(&s.url).trust_ca_pem(&pki.ca).unwrap();
    client.initialize().await.expect("initialize over https");
    let sid = client.session_id().unwrap().to_owned();
    let r = client
        .call_tool("echo", json!({"text": "over tls"}))
        .await
        .expect("echo over https");
    assert_eq!(r["content"][0]["text"], "over tls", "{r}");

    // SSE over https.
    client.call_tool("emit", json!({"count": 3})).await.unwrap();
    let mut opts = ReaderOptions::default();
    opts.from = Some(0);
    opts.max_retries = Some(0);
    let mut sse = client.reader(opts).unwrap();
    for want in 1..=3 {
        let ev = tokio::time::timeout(Duration::from_secs(10), sse.next())
            .await
            .expect("an SSE event in time")
            .expect("an SSE event");
        assert_eq!(ev.seq, Some(want));
    }
    assert!(!sse.on_websocket());

    let mut opts = ReaderOptions::default();
    opts.transport = Transport::WebSocket;
    opts.from = Some(1);
    opts.max_retries = Some(0);
    // The cursor-safe upgrade over wss, through the client.
    let mut ws = client.reader(opts).unwrap();
    for want in 2..=3 {
        let ev = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a WebSocket event in time")
            .expect("a WebSocket event");
        assert_eq!(ev.seq, Some(want));
    }
    assert!(ws.on_websocket(), "the reader fell back to SSE");
    assert_eq!(ws.fallbacks(), 0);

    // And by hand: the 101 over wss echoes the committed cursor.
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_file_iter(&pki.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let url = format!("wss://{}/mcp/session/{sid}/events", s.addr);
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", "mcp.resume.v1".parse().unwrap());
    req.headers_mut()
        .insert("last-event-id", "1".parse().unwrap());
    let (mut raw, resp) = tokio_tungstenite::connect_async_tls_with_config(
        req,
        None,
        false,
        Some(tokio_tungstenite::Connector::Rustls(Arc::new(tls))),
    )
    .await
    .expect("101 over wss");
    assert_eq!(resp.headers()["x-mcp-resume-cursor"], "3");
    assert!(matches!(
        next_frame(&mut raw, 5000).await,
        Frame::Event(2, _)
    ));
    assert!(matches!(
        next_frame(&mut raw, 5000).await,
        Frame::Event(3, _)
    ));
    drop(raw);
    s.shutdown().await;
}

#[tokio::test]
async fn a_client_without_the_ca_is_refused_with_a_certificate_error() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::create(dir.path());
    let s = tls_server(&pki).await;
    let mut client = McpClient::new(&s.url);
    let e = client.initialize().await.expect_err("an untrusted server");
    assert!(
        matches!(e, ClientError::Tls(TlsError::Untrusted { .. })),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("certificate"), "{text}");
    assert!(
        !e.is_transient(),
        "a refused certificate is not worth retrying"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn tls_config_names_the_file_at_fault() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::create(dir.path());
    let missing = dir.path().join("missing.pem");
    let e = tls_config(&missing, &pki.key).unwrap_err();
    assert!(matches!(e, ListenError::ReadCert { .. }), "{e:?}");
    assert!(e.to_string().contains("missing.pem"), "{e}");
    // A key file given as the certificate: no CERTIFICATE block in it.
    let e = tls_config(&pki.key, &pki.key).unwrap_err();
    assert!(matches!(e, ListenError::NoCert { .. }), "{e:?}");
    assert!(e.to_string().contains("key.pem"), "{e}");
    // A certificate file given as the key.
    let e = tls_config(&pki.cert, &pki.ca).unwrap_err();
    assert!(matches!(e, ListenError::ReadKey { .. }), "{e:?}");
    assert!(e.to_string().contains("ca.pem"), "{e}");
    // A key that is not the certificate's.
    let other = tempfile::tempdir().unwrap();
    let other = TestPki::create(other.path());
    let e = tls_config(&pki.cert, &other.key).unwrap_err();
    assert!(matches!(e, ListenError::Rejected { .. }), "{e:?}");
}

#[tokio::test]
async fn alpn_offers_h2_and_http_1_1_on_the_same_port() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::create(dir.path());
    let s = tls_server(&pki).await;
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let client = |h1: bool| {
        let b = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca.clone());
        if h1 { b.http1_only() } else { b }.build().unwrap()
    };
    let h2 = client(false).get(&s.url).send().await.unwrap();
    assert_eq!(h2.version(), reqwest::Version::HTTP_2);
    let h1 = client(true).get(&s.url).send().await.unwrap();
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert_eq!(h1.status(), h2.status());
    s.shutdown().await;
}

/// With a bearer token the upgrade succeeds both ways: over ws:// the token
/// travels in `Authorization`, over wss:// in the `mcp.auth.` subprotocol.
#[tokio::test]
async fn a_bearer_token_upgrades_over_ws_and_over_wss() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::create(dir.path());
    for tls in [false, true] {
        let mut config = ServerConfig::default();
        config.auth = mcp_resume_server::auth::Authenticator::bearer("s3cret");
        config.tls = tls.then(|| tls_config(&pki.cert, &pki.key).unwrap());
        let mut s = TestServer::start(config).await;
        if tls {
            s.url = s.url.replacen("http://", "https://", 1);
        }
        let mut client = McpClient::new(&s.url)
            .trust_ca_pem(&pki.ca)
            .unwrap()
            .bearer(Some("s3cret".into()));
        client.initialize().await.unwrap();
        client.call_tool("emit", json!({"count": 2})).await.unwrap();
        let mut opts = ReaderOptions::default();
        opts.transport = Transport::WebSocket;
        opts.from = Some(0);
        opts.max_retries = Some(0);
        let mut ws = client.reader(opts).unwrap();
        for want in 1..=2 {
            let ev = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("an event in time")
                .unwrap_or_else(|e| panic!("tls={tls}: {e}"));
            assert_eq!(ev.seq, Some(want));
        }
        assert!(ws.on_websocket(), "tls={tls}: fell back to SSE");
        drop(ws);
        s.shutdown().await;
    }
}
