//! What the watcher watches: its roots (each with the prefix of its documents' ids), which
//! files count (supported extension, no hidden path component, include/exclude globs, size
//! limit), and the walk that lists them.
//!
//! **Symlinks.** A symlinked file whose target resolves inside a root is followed: its target's
//! bytes are indexed under the link's path. One whose target resolves outside every root is not
//! a document (a warning says so), unless [`Tree::follow_symlinks_outside_roots`] is set (then
//! edits of the target are seen at the next scan, not live). A symlinked directory is not
//! descended into (no cycles, no tree indexed twice). Reading checks the opened file again
//! ([`crate::read_file`]), so a path swapped for a link after the walk is not followed either.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::files::{content_type_for, relative_id};
use crate::{Error, Result};

/// One watched directory.
#[derive(Clone, Debug)]
pub struct Root {
    /// Canonical path.
    pub dir: PathBuf,
    /// Prepended to the ids of its files: empty for a single root, `<dir name>/` for several.
    pub prefix: String,
}

/// Which files become documents.
#[derive(Clone, Debug)]
pub struct Filter {
    include: Option<GlobSet>,
    exclude: GlobSet,
    /// Larger files go to the dead-letter topic.
    pub max_file_bytes: u64,
}

impl Filter {
    /// `include` (empty = every supported file) and `exclude` globs over the path relative to
    /// its root (`docs/**/*.md`, `**/drafts/**`).
    pub fn new(include: &[String], exclude: &[String], max_file_bytes: u64) -> Result<Filter> {
        let build = |globs: &[String]| -> Result<GlobSet> {
            let mut b = GlobSetBuilder::new();
            for g in globs {
                b.add(Glob::new(g).map_err(|e| Error::Config(format!("glob {g:?}: {e}")))?);
            }
            b.build().map_err(|e| Error::Config(e.to_string()))
        };
        Ok(Filter {
            include: if include.is_empty() {
                None
            } else {
                Some(build(include)?)
            },
            exclude: build(exclude)?,
            max_file_bytes,
        })
    }

    /// Whether the file at `rel` (relative to its root, `/`-separated) is a document.
    pub fn accepts(&self, rel: &str) -> bool {
        !rel.split('/').any(|c| c.starts_with('.'))
            && content_type_for(Path::new(rel)).is_some()
            && self.include.as_ref().is_none_or(|g| g.is_match(rel))
            && !self.exclude.is_match(rel)
    }
}

/// The roots and the filter.
#[derive(Clone, Debug)]
pub struct Tree {
    pub roots: Vec<Root>,
    pub filter: Filter,
    /// Follow symlinks whose targets resolve outside every root (`[files]`; default off).
    pub follow_symlinks_outside_roots: bool,
}

impl Tree {
    /// Canonicalises `dirs`; several roots must have distinct directory names (their ids'
    /// prefixes).
    pub fn new(dirs: &[PathBuf], filter: Filter) -> Result<Tree> {
        let mut roots = Vec::new();
        for d in dirs {
            let dir = d.canonicalize().map_err(|source| Error::Io {
                path: d.clone(),
                source,
            })?;
            if !dir.is_dir() {
                return Err(Error::Config(format!("{} is not a directory", d.display())));
            }
            let prefix = if dirs.len() > 1 {
                let name = dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| Error::Config(format!("{} has no UTF-8 name", d.display())))?;
                format!("{name}/")
            } else {
                String::new()
            };
            if roots.iter().any(|r: &Root| r.prefix == prefix) {
                return Err(Error::Config(format!(
                    "two watched directories are named {prefix:?}: their ids would collide"
                )));
            }
            roots.push(Root { dir, prefix });
        }
        if roots.is_empty() {
            return Err(Error::Config("no directory to watch".into()));
        }
        Ok(Tree {
            roots,
            filter,
            follow_symlinks_outside_roots: false,
        })
    }

    /// The directories a file's real path must lie under (`None`: anywhere).
    pub fn allowed_dirs(&self) -> Option<Vec<PathBuf>> {
        (!self.follow_symlinks_outside_roots)
            .then(|| self.roots.iter().map(|r| r.dir.clone()).collect())
    }

    /// Whether the symlink at `path` may be followed: its target resolves inside a root, or
    /// links out of them are followed.
    fn may_follow(&self, path: &Path) -> bool {
        if self.follow_symlinks_outside_roots {
            return true;
        }
        match path.canonicalize() {
            Ok(real) if self.roots.iter().any(|r| real.starts_with(&r.dir)) => true,
            Ok(real) => {
                tracing::warn!(
                    path = %path.display(), target = %real.display(),
                    "not following a symlink out of the watched directories \
                     ([files] follow_symlinks_outside_roots = true follows it)"
                );
                false
            }
            Err(_) => false,
        }
    }

    /// The root holding `path` and the id `path` has (a file's id, or a directory's: the
    /// prefix of its files' ids); `None` outside every root or for a non-UTF-8 path. The
    /// root itself has the id of its prefix without the trailing `/`.
    pub fn locate(&self, path: &Path) -> Option<(&Root, String)> {
        let root = self.roots.iter().find(|r| path.starts_with(&r.dir))?;
        let rel = relative_id(&root.dir, path).ok()?;
        let id = if rel.is_empty() {
            root.prefix.trim_end_matches('/').to_string()
        } else {
            format!("{}{rel}", root.prefix)
        };
        Some((root, id))
    }

    /// The files under `path` (itself if it is a file) that are documents: (id, path). Entries that vanish during the walk are skipped.
    pub fn files_under(&self, path: &Path) -> Vec<(String, PathBuf)> {
        let Some((root, _)) = self.locate(path) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let walk = walkdir::WalkDir::new(path)
            .follow_links(false)
            .into_iter()
            .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
        for entry in walk {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    // A directory that vanished or cannot be listed: its files are treated as
                    // gone (a later event or scan sees them again).
                    tracing::debug!(error = %e, "skipping unreadable entry");
                    continue;
                }
            };
            let ft = entry.file_type();
            let is_file = ft.is_file() || (ft.is_symlink() && entry.path().is_file());
            if !is_file {
                continue;
            }
            let Ok(rel) = relative_id(&root.dir, entry.path()) else {
                // No id can name it (ids are UTF-8): said, not published.
                tracing::warn!(path = %entry.path().display(), "skipping a file whose path is not UTF-8");
                continue;
            };
            if self.filter.accepts(&rel) && (!ft.is_symlink() || self.may_follow(entry.path())) {
                out.push((format!("{}{rel}", root.prefix), entry.path().to_path_buf()));
            }
        }
        out
    }
}
