//! A small file system of its own for one test: a size-limited tmpfs mounted on a directory of
//! the case, which the test fills up (ENOSPC for every write under it) and frees again. Mounting
//! needs root (or CAP_SYS_ADMIN), which CI's machine has; without it the test fails and says so.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A mounted tmpfs, unmounted when dropped.
pub struct SmallDisk {
    pub path: PathBuf,
    filler: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes` on `path` (created if missing); `read_only` mounts it so that
    /// nothing can be created or written under it.
    pub fn mount(path: &Path, bytes: u64, read_only: bool) -> Result<SmallDisk> {
        std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
        let mut options = format!("size={bytes}");
        if read_only {
            options.push_str(",ro");
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(path)
            .output()
            .context("running mount")?;
        if !out.status.success() {
            bail!(
                "mounting a {bytes}-byte tmpfs on {} failed (this test needs root to mount a \
                 small file system): {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(SmallDisk {
            path: path.to_path_buf(),
            filler: path.join(".filler"),
        })
    }

    /// Fills the file system: every later write under it fails with ENOSPC until
    /// [`SmallDisk::free`].
    pub fn fill(&self) -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.filler)
            .with_context(|| format!("creating {}", self.filler.display()))?;
        let block = vec![0u8; 64 * 1024];
        let small = [0u8; 512];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => return Err(e).context("filling the small disk"),
            }
        }
        // The last few bytes of a page.
        while f.write(&small).is_ok_and(|n| n > 0) {}
        Ok(())
    }

    /// Frees what [`SmallDisk::fill`] took.
    pub fn free(&self) -> Result<()> {
        std::fs::remove_file(&self.filler)
            .with_context(|| format!("removing {}", self.filler.display()))
    }

    /// Bytes still free.
    pub fn available(&self) -> Result<u64> {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.path)
            .output()
            .context("running df")?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("reading df for {}", self.path.display()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazy: a process that still holds a file under it (a pipeline being killed) does not
        // keep the mount busy.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
