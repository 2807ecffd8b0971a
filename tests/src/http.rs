//! The one HTTP client of the integration tests (reqwest's blocking client): a request to a
//! service on `addr`, answered with its status, headers and body. A new connection per request,
//! as the services are killed and restarted on the same ports. A check of HTTP-level behaviour
//! (a credential refused before the body is read) speaks to a raw socket in its own test.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use reqwest::blocking::Client;
use reqwest::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::Method;
use serde_json::Value;

/// The longest a request may take, answer included (a long poll answers within its own
/// `timeout_ms`, which the tests keep below this).
const TIMEOUT: Duration = Duration::from_secs(120);

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// The status line and headers, as text (for messages).
    pub head: String,
    pub body: String,
    headers: reqwest::header::HeaderMap,
}

impl Reply {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.body)
            .with_context(|| format!("not JSON (status {}): {}", self.status, self.body))
    }
}

fn client() -> Result<&'static Client> {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    if let Some(c) = CLIENT.get() {
        return Ok(c);
    }
    let c = Client::builder()
        .timeout(TIMEOUT)
        .pool_max_idle_per_host(0)
        .build()
        .context("building the HTTP client")?;
    Ok(CLIENT.get_or_init(|| c))
}

/// One request to `http://{addr}{path}` with exactly `headers` (the client adds `Host`,
/// `Accept` and the body's `Content-Length`, nothing else).
pub fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Reply> {
    let method =
        Method::from_bytes(method.as_bytes()).with_context(|| format!("HTTP method {method:?}"))?;
    let url = format!("http://{addr}{path}");
    let mut req = client()?.request(method.clone(), &url).body(body.to_vec());
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).with_context(|| format!("header {k}"))?;
        let value = HeaderValue::from_str(v).with_context(|| format!("value of header {k}"))?;
        req = req.header(name, value);
    }
    let resp = req.send().with_context(|| format!("{method} {url}"))?;
    let status = resp.status();
    let mut head = format!("{:?} {status}\r\n", resp.version());
    for (k, v) in resp.headers() {
        head.push_str(&format!(
            "{k}: {}\r\n",
            String::from_utf8_lossy(v.as_bytes())
        ));
    }
    let headers = resp.headers().clone();
    let bytes = resp
        .bytes()
        .map_err(|e| anyhow!("{method} {url} → {status}: reading the body: {e}"))?;
    Ok(Reply {
        status: status.as_u16(),
        head,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        headers,
    })
}

/// Sends the head of a request, which announces a body in `Content-Length`, and one byte of
/// that body, then returns the first bytes of the answer (at most 5 s later): for checking
/// that a service answers before it reads a body, which an HTTP client would send whole.
pub fn answer_to_head(addr: &str, head: &str) -> Result<String> {
    #[expect(
        clippy::disallowed_methods,
        reason = "a test of HTTP-level behaviour: the body is announced and never sent"
    )]
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(head.as_bytes())?;
    s.write_all(b"{")?;
    let mut answer = [0u8; 64];
    let n = s.read(&mut answer).unwrap_or(0);
    Ok(String::from_utf8_lossy(&answer[..n]).into_owned())
}

/// [`send`], with `Content-Type: application/json` when there is a body and `headers` name no
/// content type.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Reply> {
    let typed = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case(CONTENT_TYPE.as_str()));
    if body.is_empty() || typed {
        return send(addr, method, path, headers, body);
    }
    let mut with_type = headers.to_vec();
    with_type.push(("Content-Type", "application/json"));
    send(addr, method, path, &with_type, body)
}
