//! The cache file: round trips, reopening, torn tails, the lock, a kill mid-write, compaction.
use std::collections::HashMap;

use super::*;
use freshet_core::embed::cache_key;

/// Opens the cache at `path` again after the test closed it. A test beside this one that
/// spawns a process (`survives_sigkill_mid_write`) holds a copy of every open descriptor, the
/// cache's locked one included, between its fork and its exec, so for that moment the lock
/// outlives the close. Another open that still holds it after 10 s is a failure.
fn open_again(path: &std::path::Path) -> Result<DiskCache> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match DiskCache::open(path) {
            Err(e) if e.is_cache_in_use() && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

/// [`open_again`], which must succeed.
pub(crate) fn reopen(path: &std::path::Path) -> DiskCache {
    open_again(path).unwrap()
}

fn vector(key: &[u8; 32], dim: usize) -> Vec<f32> {
    (0..dim)
        .map(|i| key[i % 32] as f32 + i as f32 * 0.25)
        .collect()
}

#[test]
fn roundtrip_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/cache.vec");
    let keys: Vec<[u8; 32]> = (0..10).map(|i| cache_key("m", &format!("t{i}"))).collect();
    {
        let mut c = DiskCache::open(&path).unwrap();
        assert!(c.is_empty());
        let entries: Vec<_> = keys[..5].iter().map(|k| (*k, vector(k, 384))).collect();
        c.put_many(&entries).unwrap();
        c.put_many(&[]).unwrap();
        let got = c.get_many(&keys).unwrap();
        assert_eq!(got.len(), 10);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g.as_ref(), (i < 5).then(|| vector(&keys[i], 384)).as_ref());
        }
        // Re-putting identical vectors appends nothing.
        let size = c.file_len();
        c.put_many(&entries).unwrap();
        assert_eq!(c.file_len(), size);
        // A second open of the same file is refused (the file is locked), not corrupting.
        let e = DiskCache::open(&path).unwrap_err().to_string();
        assert!(e.contains("in use"), "{e}");
    }
    let mut c = reopen(&path);
    assert_eq!(c.len(), 5);
    assert_eq!(
        c.get_many(&keys[..1]).unwrap()[0],
        Some(vector(&keys[0], 384))
    );
    // Overwrite: the last record wins, also after reopening; special values are bit-exact.
    let special = vec![-0.0, f32::MIN_POSITIVE, 1.5, f32::NAN];
    c.put_many(&[(keys[0], special.clone())]).unwrap();
    drop(c);
    let c = reopen(&path);
    assert_eq!(c.len(), 5);
    let v = c.get_many(&keys[..1]).unwrap()[0].clone().unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&v), bits(&special));
}

#[test]
fn torn_tail_and_garbage_are_handled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.vec");
    let keys: Vec<[u8; 32]> = (0..3).map(|i| cache_key("m", &i.to_string())).collect();
    {
        let mut c = DiskCache::open(&path).unwrap();
        c.put_many(&[(keys[0], vector(&keys[0], 8))]).unwrap();
        c.put_many(&[(keys[1], vector(&keys[1], 8))]).unwrap();
    }
    let full = std::fs::metadata(&path).unwrap().len();
    // cut the last record in the middle, as a crash mid-write would
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(full - 7).unwrap();
    drop(f);
    let mut c = reopen(&path);
    assert_eq!(c.len(), 1);
    assert_eq!(c.get_many(&keys[1..2]).unwrap()[0], None);
    c.put_many(&[(keys[2], vector(&keys[2], 8))]).unwrap();
    drop(c);
    // flip a byte in the last record's payload: it is dropped, the earlier one stays
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - SUM_LEN - 3] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let c = reopen(&path);
    assert_eq!(c.len(), 1);
    assert_eq!(
        c.get_many(&keys[..1]).unwrap()[0],
        Some(vector(&keys[0], 8))
    );
    drop(c);
    // not a cache file at all
    std::fs::write(&path, b"something else entirely").unwrap();
    let Err(e) = open_again(&path) else {
        panic!("a file that is no cache opened as one");
    };
    let e = e.to_string();
    assert!(e.contains("not a freshet vector cache"), "{e}");
}

#[test]
fn many_entries_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.vec");
    let mut c = DiskCache::open(&path).unwrap();
    let n = 20_000;
    let keys: Vec<[u8; 32]> = (0..n).map(|i| cache_key("m", &i.to_string())).collect();
    let t = std::time::Instant::now();
    for chunk in keys.chunks(300) {
        let entries: Vec<_> = chunk.iter().map(|k| (*k, vector(k, 384))).collect();
        c.put_many(&entries).unwrap();
    }
    let put = t.elapsed();
    let t = std::time::Instant::now();
    for chunk in keys.chunks(300) {
        let got = c.get_many(chunk).unwrap();
        assert!(got
            .iter()
            .zip(chunk)
            .all(|(g, k)| g.as_deref() == Some(&vector(k, 384)[..])));
    }
    let get = t.elapsed();
    drop(c);
    let t = std::time::Instant::now();
    let c = reopen(&path);
    eprintln!(
        "{n} entries: put {put:?}, get {get:?}, reopen {:?}, {} bytes",
        t.elapsed(),
        c.file_len()
    );
    assert_eq!(c.len(), n as u64);
    assert_eq!(
        c.file_len(),
        HEADER_LEN + n as u64 * (OVERHEAD as u64 + 384 * 4)
    );
}

const CHILD_ENV: &str = "FRESHET_EMBEDDING_CACHE_WRITER";
const CHILD_BATCH: u64 = 200;

/// Not a test on its own: the writer process that `survives_sigkill_mid_write` kills.
#[test]
#[ignore = "helper process for survives_sigkill_mid_write"]
fn cache_writer_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut c = DiskCache::open(path).unwrap();
    // continue where the previous (killed) writer stopped
    for round in c.len() / CHILD_BATCH.. {
        let entries: Vec<_> = (0..CHILD_BATCH)
            .map(|i| {
                let k = cache_key("m", &(round * CHILD_BATCH + i).to_string());
                (k, vector(&k, 384))
            })
            .collect();
        c.put_many(&entries).unwrap();
    }
}

#[test]
fn survives_sigkill_mid_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.vec");
    let mut last = 0;
    for attempt in 0..4u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cache::tests::cache_writer_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_ENV, &path)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(600 + 250 * attempt));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let c = DiskCache::open(&path).unwrap();
        let n = c.len() as usize;
        // Appends are sequential: what survived is exactly a prefix of what was written,
        // and every vector in it is intact.
        let keys: Vec<_> = (0..n + 1).map(|i| cache_key("m", &i.to_string())).collect();
        let got = c.get_many(&keys).unwrap();
        assert!(got[..n]
            .iter()
            .zip(&keys)
            .all(|(g, k)| g.as_deref() == Some(&vector(k, 384)[..])));
        assert_eq!(got[n], None);
        assert!(n >= last, "entries were lost: {last} -> {n}");
        eprintln!("after SIGKILL #{attempt}: {n} entries intact");
        last = n;
    }
    assert!(last > 0, "the writer never wrote anything");
}

/// The raw bytes of every record of the file at `path`, by key (the last record of a key).
fn raw_records(path: &std::path::Path) -> HashMap<[u8; 32], Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let mut out = HashMap::new();
    let mut pos = HEADER_LEN as usize;
    while pos < bytes.len() {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        let rec = &bytes[pos..pos + OVERHEAD + len];
        out.insert(rec[4..4 + KEY_LEN].try_into().unwrap(), rec.to_vec());
        pos += OVERHEAD + len;
    }
    out
}

#[test]
fn compaction_keeps_live_entries_byte_exact_and_drops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.vec");
    let keys: Vec<[u8; 32]> = (0..20).map(|i| cache_key("m", &format!("t{i}"))).collect();
    let mut c = DiskCache::open(&path).unwrap();
    let entries: Vec<_> = keys.iter().map(|k| (*k, vector(k, 64))).collect();
    c.put_many(&entries).unwrap();
    // An overwritten entry: its first record is dead weight too.
    c.put_many(&[(keys[0], vec![7.0; 64])]).unwrap();
    let before_raw = raw_records(&path);
    let bytes_before = c.file_len();
    let live: std::collections::HashSet<[u8; 32]> = keys.iter().step_by(2).copied().collect();

    let planned = c.plan(|k| live.contains(k));
    assert_eq!(c.file_len(), bytes_before, "a plan writes nothing");
    let done = c.compact(|k| live.contains(k)).unwrap();
    assert_eq!(planned, done);
    assert_eq!(
        (done.entries_before, done.entries_after, done.dropped()),
        (20, 10, 10)
    );
    assert_eq!(done.bytes_before, bytes_before);
    assert_eq!(done.bytes_after, c.file_len());
    assert_eq!(done.bytes_after, std::fs::metadata(&path).unwrap().len());
    assert!(done.bytes_after < bytes_before / 2, "{done:?}");
    assert!(!dir.path().join("c.vec.compact").exists());

    // Live entries byte for byte, readable now and after a reopen; dead ones gone.
    let after_raw = raw_records(&path);
    assert_eq!(after_raw.len(), 10);
    for k in &live {
        assert_eq!(after_raw[k], before_raw[k]);
    }
    let check = |c: &DiskCache| {
        let got = c.get_many(&keys).unwrap();
        for (i, g) in got.iter().enumerate() {
            let want = match i {
                0 => Some(vec![7.0; 64]),
                i if i % 2 == 0 => Some(vector(&keys[i], 64)),
                _ => None,
            };
            assert_eq!(g, &want, "key {i}");
        }
    };
    check(&c);
    // Appends go to the new file.
    c.put_many(&[(keys[1], vector(&keys[1], 64))]).unwrap();
    // The new file is locked while the cache is open.
    let e = DiskCache::open(&path).unwrap_err();
    assert!(e.is_cache_in_use(), "{e}");
    drop(c);
    let c = reopen(&path);
    assert_eq!(c.len(), 11);
    let got = c.get_many(&keys[..2]).unwrap();
    assert_eq!(got[1], Some(vector(&keys[1], 64)));
}

#[test]
fn compaction_after_a_torn_tail_and_a_stale_compact_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.vec");
    let keys: Vec<[u8; 32]> = (0..4).map(|i| cache_key("m", &format!("t{i}"))).collect();
    {
        let mut c = DiskCache::open(&path).unwrap();
        let entries: Vec<_> = keys.iter().map(|k| (*k, vector(k, 16))).collect();
        c.put_many(&entries).unwrap();
    }
    // A write cut short, and the leftover of a compaction that died.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[1, 2, 3, 4, 5]);
    std::fs::write(&path, &bytes).unwrap();
    std::fs::write(dir.path().join("c.vec.compact"), b"half").unwrap();
    let mut c = reopen(&path);
    let done = c.compact(|k| *k == keys[3]).unwrap();
    assert_eq!((done.entries_before, done.entries_after), (4, 1));
    assert_eq!(
        c.get_many(&keys).unwrap(),
        vec![None, None, None, Some(vector(&keys[3], 16))]
    );
    assert!(!dir.path().join("c.vec.compact").exists());
    // Keeping nothing leaves a valid empty cache.
    let done = c.compact(|_| false).unwrap();
    assert_eq!((done.entries_after, done.bytes_after), (0, HEADER_LEN));
    drop(c);
    assert!(reopen(&path).is_empty());
}
