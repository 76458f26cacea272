//! The server's TLS configuration from PEM files.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

use super::ListenError;

/// A rustls server configuration from a PEM certificate chain (leaf first)
/// and a PEM private key (PKCS#8, PKCS#1 or SEC1), offering ALPN `h2` and
/// `http/1.1`, with the `ring` provider. Every error names the file at fault.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, ListenError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| ListenError::ReadCert {
            path: cert.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(ListenError::NoCert {
            path: cert.to_owned(),
        });
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|source| ListenError::ReadKey {
        path: key.to_owned(),
        source,
    })?;
    let rejected = |source| ListenError::Rejected {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rejected)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(rejected)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
