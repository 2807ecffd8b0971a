//! How a service meets the network: outgoing requests that carry a secret (a JWKS fetch, a
//! rerank API key) go over https, and a service may serve TLS itself (rustls, from a PEM
//! certificate chain and key; served by [`crate::listen`]) and warns when it listens beyond
//! loopback without it.
//!
//! Plain `http://` is accepted without a setting only to a loopback host (`localhost`,
//! `127.0.0.0/8`, `::1`): that traffic never leaves the machine.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

pub use freshet_config::url::{check_url, is_loopback_host};

/// Whether a listen address (`host:port`) is on loopback only.
pub fn is_loopback_listen(listen: &str) -> bool {
    match listen.parse::<SocketAddr>() {
        Ok(a) => a.ip().is_loopback(),
        Err(_) => listen
            .rsplit_once(':')
            .is_some_and(|(host, _)| is_loopback_host(host)),
    }
}

/// The warning for a service listening on `listen` beyond loopback without TLS, if it does.
/// `what` names the service (`the query node`), `setting` its listen setting (`query.listen`).
pub fn listen_warning(what: &str, setting: &str, listen: &str, tls: bool) -> Option<String> {
    (!tls && !is_loopback_listen(listen)).then(|| {
        format!(
            "{what} listens on {listen} ({setting}) beyond loopback without TLS: credentials and \
             documents cross the network in the clear; set tls_cert_file and tls_key_file, or \
             keep it behind a proxy that terminates TLS"
        )
    })
}

/// The TLS server settings of a certificate chain and its private key (PEM files), `None` when
/// neither is set. `section` names the settings in errors (`query`: `query.tls_cert_file`).
pub fn server_config(
    section: &str,
    cert_file: &Path,
    key_file: &Path,
) -> Result<Option<Arc<ServerConfig>>> {
    match (
        cert_file.as_os_str().is_empty(),
        key_file.as_os_str().is_empty(),
    ) {
        (true, true) => return Ok(None),
        (false, false) => {}
        _ => bail!("{section}.tls_cert_file and {section}.tls_key_file go together: set both"),
    }
    let cert_pem = std::fs::read(cert_file).with_context(|| {
        format!(
            "{section}.tls_cert_file: cannot read {}",
            cert_file.display()
        )
    })?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{section}.tls_cert_file {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        bail!(
            "{section}.tls_cert_file {}: no certificate in it (PEM `BEGIN CERTIFICATE`)",
            cert_file.display()
        );
    }
    let key_pem = std::fs::read(key_file)
        .with_context(|| format!("{section}.tls_key_file: cannot read {}", key_file.display()))?;
    // The error names the file only: a parser's message could quote the key.
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
        anyhow::anyhow!(
            "{section}.tls_key_file {}: no private key in it (PEM PKCS#8, PKCS#1 or SEC1)",
            key_file.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "{section}.tls_cert_file / tls_key_file: the key does not fit the certificate, \
                 or is of a kind rustls does not serve"
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
