//! TLS for `wss://`: the one client configuration the CLI, the worker and
//! the tests use (public web roots, or the CA certificates of a PEM file).

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to connect, beyond the URL and the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// For `wss://`: a PEM file with the CA certificate(s) to trust (a private
    /// CA, or the master's self-signed certificate) instead of the public web
    /// roots built into the client.
    pub ca_cert: Option<PathBuf>,
}

/// The TLS configuration for `wss://`: trusts the certificates in `ca_cert`
/// (PEM) if given, else the public web roots (Mozilla's list, built in).
/// Errors name the file and what is wrong with it.
pub fn tls_client_config(ca_cert: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    match ca_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read CA certificate {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    format!("invalid PEM in CA certificate {}: {e}", path.display())
                })?;
                roots
                    .add(cert)
                    .map_err(|e| format!("unusable CA certificate in {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "no certificate (-----BEGIN CERTIFICATE-----) in {}",
                    path.display()
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS setup: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}
