//! A TCP forwarder that a test can cut and restore, or hold (a dependency that accepts requests
//! and never answers, so that its clients time out), to take a dependency "down" for one process
//! without stopping the shared service (Milvus serves every test at once).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

/// Forwards `127.0.0.1:<port>` to an upstream address until dropped.
pub struct TcpProxy {
    /// `127.0.0.1:<port>` to connect to instead of the upstream.
    pub addr: String,
    down: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl TcpProxy {
    pub fn start(upstream: &str) -> Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let down = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let upstream = upstream.to_owned();
        let (d, h, o) = (down.clone(), held.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                #[expect(clippy::disallowed_methods, reason = "a TCP proxy, below HTTP")]
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                if let Ok(mut open) = o.lock() {
                    open.extend([c2, s2]);
                }
                let (Ok(c3), Ok(s3)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                let (h1, h2) = (h.clone(), h.clone());
                std::thread::spawn(move || pipe(client, server, &h1));
                std::thread::spawn(move || pipe(s3, c3, &h2));
            }
        });
        Ok(TcpProxy {
            addr,
            down,
            held,
            open,
        })
    }

    /// Stops forwarding bytes, in both directions and on every connection, without closing
    /// any: requests reach nothing and get no answer, as from a server that hangs, until
    /// [`TcpProxy::release`] delivers what waited.
    pub fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    /// Forwards again after [`TcpProxy::hold`].
    pub fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
    }

    /// Closes every forwarded connection and refuses new ones until [`TcpProxy::restore`].
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        if let Ok(mut open) = self.open.lock() {
            for s in open.drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, held: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                while held.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// `host:port` of an `http://host:port` URL.
pub fn host_port(url: &str) -> Result<String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(url)
        .trim_end_matches('/');
    rest.split('/')
        .next()
        .filter(|s| s.contains(':'))
        .map(str::to_owned)
        .with_context(|| format!("no host:port in {url:?}"))
}
