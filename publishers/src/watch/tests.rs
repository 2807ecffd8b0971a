//! The watcher against a real directory and an in-memory outlet: what each change publishes,
//! what a restart publishes, and that an unacknowledged batch is never recorded.

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use freshet_kafka::{DocumentRecord, Op, Placed, Produce};

use crate::publish::Mapping;
use crate::Result;

/// Records what it was given; fails while `down` is set.
#[derive(Clone, Default)]
struct Memory {
    log: Arc<Mutex<Vec<(String, bool)>>>,
    /// Every record published, in order.
    records: Arc<Mutex<Vec<DocumentRecord>>>,
    dead: Arc<Mutex<Vec<DeadFile>>>,
    down: Arc<AtomicBool>,
    /// Next offset: records ever published.
    next: Arc<Mutex<i64>>,
}

impl Memory {
    /// (id, whether a delete) published since the last call.
    fn take(&self) -> Vec<(String, bool)> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Produce for Memory {
    fn topic(&self) -> &str {
        "t"
    }

    fn produce(&self, records: &[DocumentRecord]) -> freshet_kafka::Result<Vec<Placed>> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(freshet_kafka::Error::Fatal("broker down".into()));
        }
        let mut next = self.next.lock().unwrap();
        let start = *next;
        *next += records.len() as i64;
        let mut log = self.log.lock().unwrap();
        log.extend(records.iter().map(|r| (r.id.clone(), r.op == Op::Delete)));
        self.records.lock().unwrap().extend(records.iter().cloned());
        Ok((0..records.len() as i64)
            .map(|i| Placed {
                partition: 0,
                offset: start + i,
            })
            .collect())
    }
}

impl Outlet for Memory {
    fn dead_letter(&mut self, file: &DeadFile) -> Result<()> {
        self.dead.lock().unwrap().push(file.clone());
        Ok(())
    }
}

fn syncer(root: &Path, state: &Path, out: &Memory) -> Syncer<Memory> {
    syncer_with(root, state, out, Filter::new(&[], &[], 1 << 20).unwrap())
}

fn syncer_with(root: &Path, state: &Path, out: &Memory, filter: Filter) -> Syncer<Memory> {
    let tree = Tree::new(&[root.to_path_buf()], filter).unwrap();
    let state = State::open(state, "topic=t").unwrap();
    Syncer::new(tree, state, out.clone(), Mapping::default())
}

fn up(id: &str) -> (String, bool) {
    (id.to_string(), false)
}

fn del(id: &str) -> (String, bool) {
    (id.to_string(), true)
}

fn sorted(mut v: Vec<(String, bool)>) -> Vec<(String, bool)> {
    v.sort();
    v
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
}

#[test]
fn each_change_publishes_exactly_its_difference() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(root.join("sub/deep")).unwrap();
    write(&root.join("a.md"), "# A\n\nalpha");
    write(&root.join("sub/b.txt"), "beta");
    write(&root.join("sub/deep/c.md"), "# C\n\ngamma");
    write(&root.join("skip.xyz"), "not a document");
    let out = Memory::default();
    let mut s = syncer(&root, &dir.path().join("state.redb"), &out);

    let r = s.sync_all().unwrap();
    assert_eq!((r.upserts, r.deletes), (3, 0));
    assert_eq!(
        sorted(out.take()),
        [up("a.md"), up("sub/b.txt"), up("sub/deep/c.md")]
    );
    // Nothing changed: nothing read, nothing sent.
    let r = s.sync_all().unwrap();
    assert_eq!((r.published(), r.unchanged), (0, 3));

    // Same bytes, new times: recorded, not published.
    let a = root.join("a.md");
    let t = fs::File::options().write(true).open(&a).unwrap();
    t.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    let r = s.sync_paths([a.clone()]).unwrap();
    assert_eq!((r.published(), r.touched), (0, 1));

    // An edit, a rename, a directory removed.
    write(&a, "# A\n\nalpha, edited");
    fs::rename(root.join("sub/b.txt"), root.join("sub/b2.txt")).unwrap();
    let r = s
        .sync_paths([a.clone(), root.join("sub/b.txt"), root.join("sub/b2.txt")])
        .unwrap();
    assert_eq!((r.upserts, r.deletes), (2, 1));
    assert_eq!(
        sorted(out.take()),
        [up("a.md"), del("sub/b.txt"), up("sub/b2.txt")]
    );
    fs::remove_dir_all(root.join("sub/deep")).unwrap();
    s.sync_paths([root.join("sub/deep")]).unwrap();
    assert_eq!(out.take(), [del("sub/deep/c.md")]);
    // A directory moved in: everything below it.
    let outside = dir.path().join("incoming");
    fs::create_dir_all(outside.join("x")).unwrap();
    write(&outside.join("x/n.md"), "# N");
    write(&outside.join("o.txt"), "o");
    fs::rename(&outside, root.join("moved")).unwrap();
    s.sync_paths([root.join("moved")]).unwrap();
    assert_eq!(sorted(out.take()), [up("moved/o.txt"), up("moved/x/n.md")]);
    assert_eq!(s.state().len(), 4);
}

#[test]
fn a_restart_publishes_only_what_changed_while_down() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(&root).unwrap();
    for i in 0..20 {
        write(
            &root.join(format!("f{i}.md")),
            &format!("# F{i}\n\nbody {i}"),
        );
    }
    let state = dir.path().join("state.redb");
    let out = Memory::default();
    let before = {
        let mut s = syncer(&root, &state, &out);
        assert_eq!(s.sync_all().unwrap().upserts, 20);
        s.state().get("f1.md").unwrap().placed
    };
    out.take();
    // While down: one edit, one delete, one new file, one touch.
    write(&root.join("f1.md"), "# F1\n\nchanged");
    fs::remove_file(root.join("f2.md")).unwrap();
    write(&root.join("new.md"), "# New");
    let f3 = fs::File::options()
        .write(true)
        .open(root.join("f3.md"))
        .unwrap();
    f3.set_modified(std::time::SystemTime::now() + Duration::from_secs(9))
        .unwrap();
    let mut s = syncer(&root, &state, &out);
    let r = s.sync_all().unwrap();
    assert_eq!(
        sorted(out.take()),
        [up("f1.md"), del("f2.md"), up("new.md")]
    );
    assert_eq!((r.touched, r.unchanged), (1, 17));
    let after = s.state().get("f1.md").unwrap().placed;
    assert!(
        after.unwrap().1 >= 20 && before.unwrap().1 < 20,
        "{before:?} {after:?}"
    );
}

#[test]
fn an_unacknowledged_batch_is_never_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(&root).unwrap();
    write(&root.join("a.md"), "# A");
    let out = Memory::default();
    let mut s = syncer(&root, &dir.path().join("state.redb"), &out);
    out.down.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(s.sync_all(), Err(crate::Error::Kafka(_))));
    assert!(s.state().is_empty());
    out.down.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(s.sync_all().unwrap().upserts, 1);
    assert_eq!(out.take(), [up("a.md")]);
}

#[test]
fn refused_files_go_to_the_dead_letters_and_take_their_old_version_out() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(&root).unwrap();
    write(&root.join("t.txt"), "fine");
    write(&root.join("big.md"), &"x".repeat(2000));
    let out = Memory::default();
    let filter = Filter::new(&[], &[], 1000).unwrap();
    let mut s = syncer_with(&root, &dir.path().join("state.redb"), &out, filter);
    let r = s.sync_all().unwrap();
    assert_eq!((r.upserts, r.dead_letters), (1, 1));
    fs::write(root.join("t.txt"), [0xff, 0xfe, 0x00]).unwrap();
    let r = s.sync_all().unwrap();
    assert_eq!((r.deletes, r.dead_letters), (1, 1));
    assert_eq!(out.take(), [up("t.txt"), del("t.txt")]);
    let dead = out.dead.lock().unwrap().clone();
    let classes: Vec<_> = dead.iter().map(|d| (d.id.as_str(), d.class)).collect();
    assert_eq!(
        classes,
        [("big.md", "file_too_large"), ("t.txt", "not_utf8")]
    );
    assert!(dead[1].path.ends_with("docs/t.txt"));
    // Refused once, not again while it stays as it is; fixed, it comes back.
    assert_eq!(s.sync_all().unwrap().dead_letters, 0);
    write(&root.join("t.txt"), "fixed");
    assert_eq!(s.sync_all().unwrap().upserts, 1);
}

#[test]
fn the_filter_decides_what_is_a_document() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(root.join("drafts")).unwrap();
    fs::create_dir_all(root.join(".git")).unwrap();
    fs::create_dir_all(dir.path().join("elsewhere")).unwrap();
    write(&root.join("a.md"), "a");
    write(&root.join("b.txt"), "b");
    write(&root.join("drafts/c.md"), "c");
    write(&root.join(".git/d.md"), "d");
    write(&dir.path().join("elsewhere/e.md"), "e");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), root.join("linked")).unwrap();
    std::os::unix::fs::symlink(root.join("a.md"), root.join("a-link.md")).unwrap();
    let out = Memory::default();
    let filter = Filter::new(&["**/*.md".into()], &["drafts/**".into()], 1 << 20).unwrap();
    let mut s = syncer_with(&root, &dir.path().join("state.redb"), &out, filter);
    s.sync_all().unwrap();
    assert_eq!(sorted(out.take()), [up("a-link.md"), up("a.md")]);
    assert!(Filter::new(&["[".into()], &[], 1).is_err());
}

#[test]
fn a_state_belongs_to_one_watch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    drop(State::open(&path, "topic=a").unwrap());
    let e = State::open(&path, "topic=b").err().unwrap();
    assert!(e.to_string().contains("another watch"), "{e}");
}

#[test]
fn events_reach_the_outlet() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(&root).unwrap();
    write(&root.join("a.md"), "# A");
    let out = Memory::default();
    let mut s = syncer(&root, &dir.path().join("state.redb"), &out);
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, out2) = (stop.clone(), out.clone());
    let reports = Arc::new(Mutex::new(0usize));
    let r2 = reports.clone();
    let handle = std::thread::spawn(move || {
        watch(&mut s, &WatchSettings::default(), &stop2, |_| {
            *r2.lock().unwrap() += 1
        })
    });
    let wait_for = |want: Vec<(String, bool)>| {
        let until = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while Instant::now() < until && sorted(got.clone()) != want {
            got.extend(out2.take());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(sorted(got), want);
    };
    wait_for(vec![up("a.md")]);
    fs::create_dir_all(root.join("sub")).unwrap();
    write(&root.join("sub/b.md"), "# B");
    wait_for(vec![up("sub/b.md")]);
    fs::rename(root.join("sub"), root.join("moved")).unwrap();
    wait_for(vec![up("moved/b.md"), del("sub/b.md")]);
    write(&root.join("moved/c.md"), "# C");
    wait_for(vec![up("moved/c.md")]);
    fs::remove_dir_all(root.join("moved")).unwrap();
    wait_for(vec![del("moved/b.md"), del("moved/c.md")]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    handle.join().unwrap().unwrap();
    assert!(*reports.lock().unwrap() >= 5);
}

/// A symlink whose target resolves outside the watched directory is not followed (the file it
/// names is never read), unless the setting says so; a published file replaced by such a link
/// is taken out.
#[test]
fn a_symlink_out_of_the_roots_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    let secret = dir.path().join("secret");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&secret).unwrap();
    write(&secret.join("keys.md"), "# Keys\n\nhunter2");
    write(&root.join("a.md"), "# A");
    write(&root.join("b.md"), "# B");
    std::os::unix::fs::symlink(secret.join("keys.md"), root.join("out.md")).unwrap();
    std::os::unix::fs::symlink(root.join("a.md"), root.join("in.md")).unwrap();
    // through a relative link and a link to a link
    std::os::unix::fs::symlink("../secret/keys.md", root.join("rel.md")).unwrap();
    std::os::unix::fs::symlink(root.join("out.md"), root.join("chain.md")).unwrap();
    let out = Memory::default();
    let mut s = syncer(&root, &dir.path().join("state.redb"), &out);
    s.sync_all().unwrap();
    assert_eq!(sorted(out.take()), [up("a.md"), up("b.md"), up("in.md")]);
    assert!(out.dead.lock().unwrap().is_empty());
    // A published file swapped for a link out of the tree: its document goes.
    fs::remove_file(root.join("b.md")).unwrap();
    std::os::unix::fs::symlink(secret.join("keys.md"), root.join("b.md")).unwrap();
    s.sync_paths([root.join("b.md")]).unwrap();
    assert_eq!(out.take(), [del("b.md")]);
    let texts: Vec<String> = out
        .records
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| r.value.as_ref())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert!(texts.iter().all(|t| !t.contains("hunter2")), "{texts:?}");

    // Told to follow them, the same tree publishes the links' targets.
    let followed = Memory::default();
    let filter = Filter::new(&[], &[], 1 << 20).unwrap();
    let mut tree = Tree::new(std::slice::from_ref(&root), filter).unwrap();
    tree.follow_symlinks_outside_roots = true;
    let state = State::open(&dir.path().join("follow.redb"), "topic=t").unwrap();
    let mut s = Syncer::new(tree, state, followed.clone(), Mapping::default());
    s.sync_all().unwrap();
    assert_eq!(
        sorted(followed.take()),
        [
            up("a.md"),
            up("b.md"),
            up("chain.md"),
            up("in.md"),
            up("out.md"),
            up("rel.md")
        ]
    );
}

/// A FIFO, a link to one and a link to a device under the root never hold up a sync, and
/// [`crate::read_file`] refuses them at once; a file over the limit is read no further
/// than the limit.
#[test]
fn fifos_and_devices_never_block_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(&root).unwrap();
    write(&root.join("a.md"), "# A");
    let fifo = root.join("pipe.md");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) reads the NUL-terminated path that `c` owns, nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    std::os::unix::fs::symlink(&fifo, root.join("pipe-link.md")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", root.join("zero.txt")).unwrap();
    let out = Memory::default();
    let state = dir.path().join("state.redb");
    let (root2, out2) = (root.clone(), out.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let filter = Filter::new(&[], &[], 1 << 20).unwrap();
        let mut tree = Tree::new(&[root2], filter).unwrap();
        tree.follow_symlinks_outside_roots = true;
        let state = State::open(&state, "topic=t").unwrap();
        let mut s = Syncer::new(tree, state, out2, Mapping::default());
        let _ = tx.send(s.sync_all().map(|r| r.upserts));
    });
    let synced = rx.recv_timeout(Duration::from_secs(10));
    // Unblock a reader stuck on the FIFO, should there be one, before asserting.
    let _w = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo);
    assert_eq!(synced.expect("the sync finished").unwrap(), 1);
    assert_eq!(out.take(), [up("a.md")]);
    assert!(out.dead.lock().unwrap().is_empty());

    let started = Instant::now();
    for p in [fifo.clone(), root.join("pipe-link.md"), "/dev/zero".into()] {
        match crate::read_file(&p, 10, None) {
            Err(crate::Unread::NotRegular(_)) => {}
            other => panic!("{}: {other:?}", p.display()),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    write(&root.join("big.md"), &"x".repeat(100));
    assert!(matches!(
        crate::read_file(&root.join("big.md"), 10, None),
        Err(crate::Unread::TooLarge {
            size: 100,
            limit: 10
        })
    ));
    assert_eq!(
        crate::read_file(&root.join("big.md"), 100, Some(std::slice::from_ref(&root)))
            .unwrap()
            .len(),
        100
    );
}

/// Which ACL each file carries follows the rules; a changed mapping re-sends exactly the files
/// whose ACL it changes (their bytes did not change), and an older state's entry without an
/// ACL reads as "none stated".
#[test]
fn an_acl_change_republishes_exactly_the_files_it_changes() {
    use crate::acl::{AclRuleConfig, FileAcls};
    use freshet_operators::envelope::Acl;
    use serde_json::json;

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    fs::create_dir_all(root.join("hr")).unwrap();
    fs::create_dir_all(root.join("eng")).unwrap();
    write(&root.join("hr/pay.md"), "# Pay");
    write(&root.join("hr/leave.md"), "# Leave");
    write(&root.join("eng/x.md"), "# X");
    write(&root.join("open.md"), "# Open");
    let state = dir.path().join("state.redb");
    let rule = |glob: &str, principals: &[&str]| AclRuleConfig {
        glob: glob.into(),
        principals: principals.iter().map(|p| p.to_string()).collect(),
        public: principals.is_empty(),
    };
    let run = |rules: &[AclRuleConfig], default: Acl, out: &Memory| {
        let tree = Tree::new(
            std::slice::from_ref(&root),
            Filter::new(&[], &[], 1 << 20).unwrap(),
        )
        .unwrap();
        let mapping = Mapping {
            acl: FileAcls::new(rules, default).unwrap(),
            ..Mapping::default()
        };
        let mut s = Syncer::new(
            tree,
            State::open(&state, "topic=t").unwrap(),
            out.clone(),
            mapping,
        );
        s.sync_all().unwrap();
        let acls: Vec<(String, serde_json::Value)> =
            std::mem::take(&mut *out.records.lock().unwrap())
                .into_iter()
                .map(|r| {
                    let v: serde_json::Value =
                        serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
                    (r.id, v["acl"].clone())
                })
                .collect();
        out.take();
        let mut acls = acls;
        acls.sort_by(|a, b| a.0.cmp(&b.0));
        acls
    };
    let out = Memory::default();
    let staff = Acl::principals(["group:staff"]).unwrap();
    let first = run(
        &[
            rule("hr/pay.md", &["group:payroll"]),
            rule("hr/**", &["group:hr"]),
            rule("open.md", &[]),
        ],
        staff.clone(),
        &out,
    );
    assert_eq!(
        first,
        [
            ("eng/x.md".to_string(), json!(["group:staff"])),
            ("hr/leave.md".to_string(), json!(["group:hr"])),
            ("hr/pay.md".to_string(), json!(["group:payroll"])),
            ("open.md".to_string(), json!("public")),
        ]
    );
    // The same mapping again: nothing is sent.
    let same = run(
        &[
            rule("hr/pay.md", &["group:payroll"]),
            rule("hr/**", &["group:hr"]),
            rule("open.md", &[]),
        ],
        staff.clone(),
        &out,
    );
    assert!(same.is_empty(), "{same:?}");
    // hr/** narrowed to group:hr-leads, open.md's rule removed: exactly those two re-sent.
    let changed = run(
        &[
            rule("hr/pay.md", &["group:payroll"]),
            rule("hr/**", &["group:hr-leads"]),
        ],
        staff,
        &out,
    );
    assert_eq!(
        changed,
        [
            ("hr/leave.md".to_string(), json!(["group:hr-leads"])),
            ("open.md".to_string(), json!(["group:staff"])),
        ]
    );
    // An older state's entry, without an ACL, reads as none stated.
    let old: Entry = serde_json::from_str(
        r#"{"size":1,"mtime_ns":2,"ctime_ns":3,"hash":"h","placed":[0,4],"rejected":false}"#,
    )
    .unwrap();
    assert_eq!(old.acl, Acl::Unstated);
}
