//! The client's TLS: which certificates it trusts (a CA file, else the system's bundle) and
//! what a failed handshake was about.

use super::ClientError;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where systems keep their CA bundle, tried in order after `$SSL_CERT_FILE`.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// A rustls client configuration trusting `ca_file`'s certificates, else the system's.
pub(super) fn client_config(
    ca_file: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let (path, given) = match ca_file {
        Some(path) => (path.to_path_buf(), true),
        None => (system_bundle()?, false),
    };
    let bad = |reason: String| ClientError::CaFile {
        path: path.clone(),
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    let certificates =
        CertificateDer::pem_file_iter(&path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    for certificate in certificates {
        let certificate = certificate.map_err(|e| bad(format!("not PEM certificates: {e}")))?;
        // A system bundle may hold a certificate rustls cannot use; a given file may not.
        if let Err(e) = roots.add(certificate) {
            if given {
                return Err(bad(format!(
                    "holds a certificate that cannot be trusted: {e}"
                )));
            }
        }
    }
    if roots.is_empty() {
        return Err(bad(
            "holds no certificate (expected PEM `-----BEGIN CERTIFICATE-----` blocks)".into(),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls {
            url: String::new(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The system's CA bundle: `$SSL_CERT_FILE`, else the first of [`SYSTEM_BUNDLES`] present.
fn system_bundle() -> Result<PathBuf, ClientError> {
    if let Some(path) = std::env::var_os("SSL_CERT_FILE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    SYSTEM_BUNDLES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| ClientError::CaFile {
            path: PathBuf::from(SYSTEM_BUNDLES[0]),
            reason: "no system CA bundle found (nor $SSL_CERT_FILE); give the CA that signed \
                     the daemon's certificate as a CA file"
                .into(),
        })
}

/// The rustls error inside an I/O error of the handshake, if that is what it is.
fn rustls_error(error: &std::io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}

/// Whether a handshake's I/O error came from TLS.
pub(super) fn is_tls_error(error: &std::io::Error) -> bool {
    rustls_error(error).is_some()
}

/// A TLS failure in words, with what usually fixes it.
pub(super) fn describe(error: &std::io::Error) -> String {
    match rustls_error(error) {
        Some(rustls::Error::InvalidCertificate(why)) => format!(
            "the daemon's certificate is not trusted ({why:?}); trust the CA that signed it \
             (or the certificate itself, when self-signed) with a CA file, and connect by a \
             name or address the certificate carries"
        ),
        Some(rustls::Error::InvalidMessage(_))
        | Some(rustls::Error::InappropriateMessage { .. }) => {
            format!("{error} (does the daemon's listener have TLS? without it, use ws://)")
        }
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("cv-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ca.pem");
        std::fs::write(&file, "not a certificate\n").unwrap();
        let message = client_config(Some(&file)).unwrap_err().to_string();
        assert!(message.contains(&file.display().to_string()), "{message}");
        assert!(message.contains("holds no certificate"), "{message}");
        let missing = client_config(Some(&dir.join("absent.pem")))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("cannot read it"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tls_errors_are_told_from_other_io_errors() {
        let tls = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert!(is_tls_error(&tls));
        assert!(describe(&tls).contains("not trusted"), "{}", describe(&tls));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_tls_error(&refused));
    }
}
