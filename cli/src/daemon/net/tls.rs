//! The listeners' TLS: the certificate and key from `daemon.tls-cert`/`tls-key`, and with
//! `daemon.client-ca` a client certificate required (mutual TLS). rustls on the ring
//! provider.

use super::NetworkError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// The server configuration for `cert` and `key`, asking clients for a certificate that
/// chains to `client_ca` when it is set.
pub(super) fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, NetworkError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| NetworkError::Tls {
        path: key.to_path_buf(),
        reason: format!("no private key read ({e}); expected a PEM private key"),
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| NetworkError::TlsSetup(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(ca)? {
                roots.add(certificate).map_err(|e| NetworkError::Tls {
                    path: ca.to_path_buf(),
                    reason: format!("not a CA certificate: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| NetworkError::Tls {
                    path: ca.to_path_buf(),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| NetworkError::Tls {
            path: cert.to_path_buf(),
            reason: format!("the certificate and key do not go together: {e}"),
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Every certificate of a PEM file; none is an error naming the file.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, NetworkError> {
    let refuse = |reason: String| NetworkError::Tls {
        path: path.to_path_buf(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| refuse(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refuse(format!("not a PEM certificate file: {e}")))?;
    if chain.is_empty() {
        return Err(refuse(
            "no certificate in it; expected PEM `CERTIFICATE` blocks".into(),
        ));
    }
    Ok(chain)
}
