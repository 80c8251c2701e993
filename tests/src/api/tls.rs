//! A self-signed CA and a server certificate for the API server.

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::IpAddr;
use std::sync::Arc;

pub struct Pki {
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

/// Makes a CA and a server certificate valid for `ips` and the usual in-cluster DNS names.
pub fn make(ips: &[IpAddr]) -> anyhow::Result<Pki> {
    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "prrte-k8s-sandbox-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let year: i32 = super::defaults::rfc3339(super::defaults::now_secs())[..4]
        .parse()
        .unwrap_or(2025);
    ca.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    ca.not_after = rcgen::date_time_ymd(year + 10, 1, 1);
    let ca_cert = ca.self_signed(&ca_key).context("self-signing the CA")?;

    let key = KeyPair::generate().context("generating the server key")?;
    let mut p = CertificateParams::new(vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
    ])?;
    p.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    for ip in ips {
        let san = SanType::IpAddress(*ip);
        if !p.subject_alt_names.contains(&san) {
            p.subject_alt_names.push(san);
        }
    }
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    p.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    p.not_after = rcgen::date_time_ymd(year + 10, 1, 1);
    let cert = p
        .signed_by(&key, &ca_cert, &ca_key)
        .context("signing the server certificate")?;

    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone(), ca_cert.der().clone()];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS protocol versions")?
    .with_no_client_auth()
    .with_single_cert(chain, key_der)
    .context("building the TLS server configuration")?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Pki {
        ca_pem: ca_cert.pem(),
        server_config: Arc::new(cfg),
    })
}
