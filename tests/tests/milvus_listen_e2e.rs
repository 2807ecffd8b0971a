//! Milvus as `deploy/start-milvus.sh` starts it (standalone and milvus-lite, both started by
//! `deploy/test.sh`) can be reached from this host's loopback only: every TCP socket a Milvus
//! process listens on is bound to a loopback address, or lies in a network namespace whose only
//! interface is the loopback.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, ensure, Context, Result};
use freshet_tests::{env, process_group};

/// A listening socket: its local address (hex, as in `/proc/net/tcp`) and port.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Listener {
    pid: u32,
    addr: String,
    port: u16,
}

/// The TCP sockets `pid` listens on, read from its own network namespace's tables.
fn listeners(pid: u32) -> Result<Vec<Listener>> {
    let mut inodes = BTreeSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        if let Ok(target) = std::fs::read_link(fd?.path()) {
            let t = target.to_string_lossy();
            if let Some(i) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                inodes.insert(i.to_owned());
            }
        }
    }
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" || !inodes.contains(f[9]) {
                continue;
            }
            let (addr, port) = f[1].split_once(':').context("odd address")?;
            out.push(Listener {
                pid,
                addr: addr.to_owned(),
                port: u16::from_str_radix(port, 16)?,
            });
        }
    }
    Ok(out)
}

/// 127.0.0.0/8, ::1 or ::ffff:127.x.y.z, in `/proc/net/tcp{,6}`'s hex (32-bit words in host
/// order).
fn is_loopback(hex: &str) -> bool {
    match hex.len() {
        8 => hex.ends_with("7F"),
        32 => {
            hex == "00000000000000000000000001000000"
                || (hex.starts_with("0000000000000000FFFF0000") && hex.ends_with("7F"))
        }
        _ => false,
    }
}

/// The interfaces of `pid`'s network namespace.
fn interfaces(pid: u32) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev"))?;
    Ok(text
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_owned()))
        .collect())
}

fn check(name: &str, run_dir: PathBuf, proxy_port: u16) -> Result<()> {
    let pids = process_group(&run_dir.join("pids/milvus.pid"))?;
    let mut all = Vec::new();
    for pid in &pids {
        all.extend(listeners(*pid)?);
    }
    ensure!(
        all.iter().any(|l| l.port == proxy_port),
        "{name}: no process listens on the proxy port {proxy_port}: {all:?}"
    );
    let mut open = Vec::new();
    for l in &all {
        if is_loopback(&l.addr) {
            continue;
        }
        let ifaces = interfaces(l.pid)?;
        if ifaces.iter().any(|i| i != "lo") {
            open.push(format!("{l:?} in a namespace with {ifaces:?}"));
        }
    }
    if !open.is_empty() {
        bail!(
            "{name}: {} listeners reachable from outside the host's loopback: {}",
            open.len(),
            open.join("; ")
        );
    }
    eprintln!(
        "{name}: {} listeners of {} processes, none reachable from outside the loopback",
        all.len(),
        pids.len()
    );
    Ok(())
}

#[test]
fn milvus_listens_on_the_loopback_only() -> Result<()> {
    let run_dir = PathBuf::from(env("FRESHET_RUN_DIR"));
    let port = |v: &str| -> Result<u16> {
        let url = env(v);
        url.rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .with_context(|| format!("no port in {v}={url}"))
    };
    check("standalone", run_dir.clone(), port("FRESHET_MILVUS_URL")?)?;
    check(
        "lite",
        run_dir.join("lite"),
        port("FRESHET_MILVUS_LITE_URL")?,
    )?;
    Ok(())
}

#[test]
fn loopback_addresses_read_as_such() {
    assert!(is_loopback("0100007F"));
    assert!(!is_loopback("00000000"));
    assert!(is_loopback("00000000000000000000000001000000"));
    assert!(!is_loopback("00000000000000000000000000000000"));
    assert!(is_loopback("0000000000000000FFFF00000100007F"));
    assert!(!is_loopback("0000000000000000FFFF00000A00000A"));
}
