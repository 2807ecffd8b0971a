//! How the publishers read a file: regular files only, never blocking on a FIFO or a device,
//! at most a size limit, and only within the directories they were given (symlinks resolved)
//! unless told otherwise.

use std::fmt;
use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why [`read_file`] did not read a file.
#[derive(Debug)]
pub enum Unread {
    /// It does not exist (any more).
    Gone,
    /// Not a regular file (a FIFO, socket, device or directory): never read.
    NotRegular(&'static str),
    /// Its real path (symlinks resolved) is outside the directories allowed.
    OutsideRoots(PathBuf),
    /// Over the size limit; `size` is what was seen (at most `limit + 1` bytes are read).
    TooLarge {
        size: u64,
        limit: u64,
    },
    Io(std::io::Error),
}

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unread::Gone => f.write_str("the file is gone"),
            Unread::NotRegular(kind) => write!(f, "not a regular file (a {kind}): not read"),
            Unread::OutsideRoots(real) => write!(
                f,
                "a symlink to {}, outside the directories: not followed",
                real.display()
            ),
            Unread::TooLarge { size, limit } => {
                write!(f, "{size} bytes, over the limit of {limit}")
            }
            Unread::Io(e) => write!(f, "cannot read: {e}"),
        }
    }
}

impl From<std::io::Error> for Unread {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == ErrorKind::NotFound {
            Unread::Gone
        } else {
            Unread::Io(e)
        }
    }
}

/// Reads the file at `path` (following symlinks) if it is a regular file of at most
/// `max_bytes` whose real path lies under one of `roots` (`None`: anywhere). It never blocks on
/// a FIFO or a device: the path is looked at first and such a file is not opened, and the open
/// itself is non-blocking and checked again on the opened file (the path may change meanwhile);
/// at most `max_bytes + 1` bytes are read, so a file that grows is refused, not read whole.
pub fn read_file(
    path: &Path,
    max_bytes: u64,
    roots: Option<&[PathBuf]>,
) -> std::result::Result<Vec<u8>, Unread> {
    let before = fs::metadata(path)?;
    if !before.is_file() {
        return Err(Unread::NotRegular(kind(&before.file_type())));
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Unread::NotRegular(kind(&meta.file_type())));
    }
    if let Some(roots) = roots {
        let real = real_path(&file, path)?;
        if !roots.iter().any(|r| real.starts_with(r)) {
            return Err(Unread::OutsideRoots(real));
        }
    }
    let too_large = |size: u64| Unread::TooLarge {
        size,
        limit: max_bytes,
    };
    if meta.len() > max_bytes {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&file)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(Unread::Io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The real path of an opened file: what the process's descriptor names (Linux), else the
/// path with every symlink resolved.
fn real_path(file: &fs::File, path: &Path) -> std::io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    match fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        Ok(p) if p.is_absolute() => Ok(p),
        _ => path.canonicalize(),
    }
}

fn kind(t: &fs::FileType) -> &'static str {
    if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_dir() {
        "directory"
    } else {
        "special file"
    }
}
