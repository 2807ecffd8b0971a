//! URLs a secret is sent to (a JWKS endpoint, a rerank or chat API): [`check_url`] accepts
//! `https://`, and plain `http://` only to a loopback host (`localhost`, `127.0.0.0/8`, `::1`),
//! whose traffic never leaves the machine, or where a setting allows it.

use std::net::IpAddr;

use anyhow::{bail, Context, Result};

/// Whether `host` (a name or an IP address, IPv6 with or without brackets) is this machine.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Checks a URL a secret is sent to: `https://`, or `http://` to a loopback host, or `http://`
/// anywhere when `allow_insecure_http` (the setting named `allow_setting`) is set. `what` names
/// the URL's setting in errors.
pub fn check_url(
    what: &str,
    url: &str,
    allow_insecure_http: bool,
    allow_setting: &str,
) -> Result<()> {
    let parsed = url::Url::parse(url).with_context(|| format!("{what} {url:?}: not a URL"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => {
            let host = parsed.host_str().unwrap_or("");
            if allow_insecure_http || is_loopback_host(host) {
                Ok(())
            } else {
                bail!(
                    "{what} {url:?}: plain http to {host:?} can be read and changed on the way; \
                     use https://, or set {allow_setting} = true if the network path is trusted"
                )
            }
        }
        other => bail!("{what} {url:?}: not an http(s) URL (scheme {other:?})"),
    }
}
