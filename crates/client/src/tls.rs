//! TLS for `https://` and `wss://`: rustls with the `ring` provider, the
//! Mozilla roots, and optionally a private CA from a PEM file.
//!
//! One trust decision feeds both transports, so the SSE reader and the
//! WebSocket upgrade of the same session can never disagree about a server.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// Why TLS could not be set up or a server was refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA file could not be read or is not PEM.
    #[error("cannot read a PEM CA certificate from {}", path.display())]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The CA file holds no `CERTIFICATE` block.
    #[error("the CA file {} holds no PEM certificate", path.display())]
    NoCa {
        /// The file.
        path: PathBuf,
    },
    /// A certificate in the CA file cannot serve as a trust anchor.
    #[error("the CA file {} holds a certificate that cannot be a trust anchor", path.display())]
    BadCa {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
    /// The server's certificate did not verify (unknown issuer, wrong name,
    /// expired): retrying cannot help.
    #[error(
        "the server's TLS certificate was refused ({source}); if a private CA signed it, \
         trust that CA (--cacert PEM, McpClient::trust_ca_pem)"
    )]
    Untrusted {
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
    /// The TLS handshake failed otherwise (say, the server does not speak TLS).
    #[error("TLS handshake failed ({source})")]
    Handshake {
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
}

/// The two client configurations of one trust decision.
#[derive(Clone)]
pub(crate) struct TlsConfigs {
    /// For reqwest: ALPN `h2`, `http/1.1`.
    pub(crate) http: ClientConfig,
    /// For the WebSocket upgrade, which is HTTP/1.1 only.
    pub(crate) ws: Arc<ClientConfig>,
}

impl TlsConfigs {
    /// The Mozilla roots only; built once per process.
    pub(crate) fn public() -> Self {
        static PUBLIC: OnceLock<TlsConfigs> = OnceLock::new();
        PUBLIC
            .get_or_init(|| Self::with_roots(public_roots()))
            .clone()
    }

    /// The Mozilla roots and every certificate in the PEM file `ca`.
    pub(crate) fn with_ca_file(ca: &Path) -> Result<Self, TlsError> {
        let certs = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|source| TlsError::ReadCa {
                path: ca.to_owned(),
                source,
            })?;
        if certs.is_empty() {
            return Err(TlsError::NoCa {
                path: ca.to_owned(),
            });
        }
        let mut roots = public_roots();
        for cert in certs {
            roots.add(cert).map_err(|source| TlsError::BadCa {
                path: ca.to_owned(),
                source,
            })?;
        }
        Ok(Self::with_roots(roots))
    }

    fn with_roots(roots: RootCertStore) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut http = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("the ring provider offers the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut ws = http.clone();
        http.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        ws.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self {
            http,
            ws: Arc::new(ws),
        }
    }

    /// A reqwest client that trusts exactly these roots.
    pub(crate) fn reqwest(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .use_preconfigured_tls(self.http.clone())
            .build()
            .expect("a reqwest client with a rustls configuration builds")
    }
}

fn public_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// The rustls error somewhere in `e`'s chain, if the failure was TLS's.
/// `io::Error` hides its payload from `source()` (and tokio-rustls nests
/// one in another), so look inside each.
pub(crate) fn tls_cause(e: &(dyn StdError + 'static)) -> Option<TlsError> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            let source = r.clone();
            return Some(match r {
                rustls::Error::InvalidCertificate(_) => TlsError::Untrusted { source },
                _ => TlsError::Handshake { source },
            });
        }
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => e.source(),
        };
    }
    None
}

/// `e` and its sources on one line, for errors whose own text is vague
/// ("error sending request").
pub(crate) fn with_sources(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        next = s.source();
    }
    out
}
