//! A private CA and a server certificate for 127.0.0.1 and localhost, made
//! at test time, so TLS tests need no checked-in keys that could expire.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// PEM files of a fresh CA and of a server certificate it signed.
pub struct TestPki {
    /// The CA certificate (what a client must trust).
    pub ca: PathBuf,
    /// The server's certificate chain (leaf, then the CA).
    pub cert: PathBuf,
    /// The server's private key (PKCS#8).
    pub key: PathBuf,
}

impl TestPki {
    /// Writes `ca.pem`, `cert.pem` and `key.pem` into `dir`.
    pub fn create(dir: &Path) -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "mcp-resume test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");

        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "mcp-resume test server");
        let cert = params.signed_by(&key, &ca).expect("server certificate");

        let pki = Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&pki.ca, ca.pem()).expect("write ca.pem");
        std::fs::write(&pki.cert, format!("{}{}", cert.pem(), ca.pem())).expect("write cert.pem");
        std::fs::write(&pki.key, key.serialize_pem()).expect("write key.pem");
        pki
    }
}
