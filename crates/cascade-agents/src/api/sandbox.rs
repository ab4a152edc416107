//! Where the api agent's tools may read and write: path confinement.
//!
//! Every path a model names is checked before any file is opened:
//! - a `..` component is refused outright (no path needs it: the model is
//!   given absolute paths and its working directory);
//! - a relative path is taken from the working directory; an absolute one
//!   must lie under it (as given or canonical, since `/tmp` may be a
//!   symlink);
//! - the path is then resolved through the file system (the deepest
//!   existing ancestor is canonicalised, so a symlink anywhere on the way is
//!   followed) and the result must still lie under the canonical working
//!   directory: a symlink leading out is refused, for reading and writing;
//! - writing a symlink whose target does not exist is refused (the write
//!   would create a file wherever it points);
//! - nothing under a `.git` directory or file is written.
//!
//! Planning steps may read the project but write only their own files
//! ([`Writable::Only`]); those may lie outside the working directory (a
//! plan session directory elsewhere). A refusal is a [`Refused`] whose
//! sentence the model reads as the tool's error; nothing is touched.

use std::path::{Component, Path, PathBuf};

/// What the agent may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writable {
    /// Anything under the working directory (a story's worktree).
    Tree,
    /// Only these files (a planning step's outputs).
    Only(Vec<PathBuf>),
}

/// Why a path the model named is refused (its Display is what the model reads).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the path is empty")]
    Empty,
    #[error("the path contains a NUL byte")]
    Nul,
    #[error("refused: '{path}' contains '..'; name files by their absolute path under {} or relative to it", root.display())]
    ParentDir { path: String, root: PathBuf },
    #[error("refused: '{path}' is outside the working directory {}", root.display())]
    Outside { path: String, root: PathBuf },
    #[error("cannot resolve '{0}'")]
    Unresolved(String),
    #[error("refused: '{0}' is a symlink to a missing target; write the file itself")]
    DanglingSymlink(String),
    #[error("refused: this step may write only {files} ('{path}' is not one of them)")]
    NotListed { path: String, files: String },
    #[error("refused: '{0}' is inside .git")]
    InsideGit(String),
}

/// The confinement of one run.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The working directory as given.
    given: PathBuf,
    /// The same, canonical: what every resolved path must lie under.
    real_root: PathBuf,
    writable: Writable,
    /// `Writable::Only`'s files, each with its canonical parent.
    only: Vec<PathBuf>,
}

impl Sandbox {
    /// A sandbox for `root` (which must exist).
    pub fn new(root: &Path, writable: Writable) -> std::io::Result<Sandbox> {
        let real_root = std::fs::canonicalize(root)?;
        let only = match &writable {
            Writable::Tree => Vec::new(),
            Writable::Only(files) => files.iter().filter_map(|f| real_target(f)).collect(),
        };
        Ok(Sandbox {
            given: root.to_path_buf(),
            real_root,
            writable,
            only,
        })
    }

    /// The canonical working directory (what the system prompt names).
    pub fn root(&self) -> &Path {
        &self.real_root
    }

    /// The files a planning step may write, when it is limited to them.
    pub fn write_only(&self) -> Option<&[PathBuf]> {
        match &self.writable {
            Writable::Tree => None,
            Writable::Only(files) => Some(files),
        }
    }

    /// The real path to read for `path`.
    pub fn readable(&self, path: &str) -> Result<PathBuf, Refused> {
        let joined = self.join(path)?;
        let real = real_target(&joined).ok_or_else(|| Refused::Unresolved(path.into()))?;
        if real.starts_with(&self.real_root) || self.only.contains(&real) {
            Ok(real)
        } else {
            Err(self.outside(path))
        }
    }

    /// The real path to write for `path`.
    pub fn writable(&self, path: &str) -> Result<PathBuf, Refused> {
        let joined = self.join(path)?;
        if let Ok(meta) = std::fs::symlink_metadata(&joined) {
            if meta.file_type().is_symlink() && std::fs::metadata(&joined).is_err() {
                return Err(Refused::DanglingSymlink(path.into()));
            }
        }
        let real = real_target(&joined).ok_or_else(|| Refused::Unresolved(path.into()))?;
        match &self.writable {
            Writable::Only(files) => {
                if self.only.contains(&real) {
                    Ok(real)
                } else {
                    Err(Refused::NotListed {
                        path: path.into(),
                        files: files
                            .iter()
                            .map(|f| format!("'{}'", f.display()))
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
                }
            }
            Writable::Tree => {
                let Ok(inside) = real.strip_prefix(&self.real_root) else {
                    return Err(self.outside(path));
                };
                if inside.components().any(|c| c.as_os_str() == ".git") {
                    return Err(Refused::InsideGit(path.into()));
                }
                Ok(real)
            }
        }
    }

    /// `path` made absolute, when it has no `..` and (absolute) lies under
    /// the working directory as given or canonical.
    fn join(&self, path: &str) -> Result<PathBuf, Refused> {
        if path.trim().is_empty() {
            return Err(Refused::Empty);
        }
        if path.contains('\0') {
            return Err(Refused::Nul);
        }
        let p = Path::new(path);
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(Refused::ParentDir {
                path: path.into(),
                root: self.real_root.clone(),
            });
        }
        if p.is_relative() {
            return Ok(self.real_root.join(p));
        }
        let allowed = p.starts_with(&self.real_root)
            || p.starts_with(&self.given)
            || self.only.iter().any(|f| f == p)
            || match &self.writable {
                Writable::Only(files) => files.iter().any(|f| f == p),
                Writable::Tree => false,
            };
        if allowed {
            Ok(p.to_path_buf())
        } else {
            Err(self.outside(path))
        }
    }

    fn outside(&self, path: &str) -> Refused {
        Refused::Outside {
            path: path.into(),
            root: self.real_root.clone(),
        }
    }
}

/// `path` with its deepest existing ancestor canonicalised (symlinks on
/// the way followed) and the rest appended; `None` when nothing resolves.
fn real_target(path: &Path) -> Option<PathBuf> {
    if let Ok(real) = std::fs::canonicalize(path) {
        return Some(real);
    }
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut cur = path;
    loop {
        rest.push(cur.file_name()?);
        cur = cur.parent()?;
        if let Ok(real) = std::fs::canonicalize(cur) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return Some(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, tempfile::TempDir, Sandbox) {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(work.path().join("src")).unwrap();
        std::fs::write(work.path().join("src/lib.rs"), "fn a() {}\n").unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        let sb = Sandbox::new(work.path(), Writable::Tree).unwrap();
        (work, outside, sb)
    }

    #[test]
    fn inside_paths_resolve_relative_or_absolute() {
        let (work, _o, sb) = tree();
        let real = std::fs::canonicalize(work.path()).unwrap();
        assert_eq!(sb.readable("src/lib.rs").unwrap(), real.join("src/lib.rs"));
        let abs = work.path().join("src/lib.rs").display().to_string();
        assert_eq!(sb.readable(&abs).unwrap(), real.join("src/lib.rs"));
        // A new file in a new directory may be written.
        assert_eq!(
            sb.writable("new/dir/x.rs").unwrap(),
            real.join("new/dir/x.rs")
        );
    }

    #[test]
    fn dot_dot_is_refused_even_when_it_stays_inside() {
        let (_w, _o, sb) = tree();
        for p in ["../../etc/passwd", "src/../src/lib.rs", "./.."] {
            let e = sb.readable(p).unwrap_err();
            assert!(matches!(e, Refused::ParentDir { .. }), "{p}: {e}");
            assert!(e.to_string().contains("'..'"), "{p}: {e}");
            assert!(sb.writable(p).is_err());
        }
    }

    #[test]
    fn absolute_paths_outside_are_refused() {
        let (_w, outside, sb) = tree();
        let secret = outside.path().join("secret").display().to_string();
        assert!(sb
            .readable(&secret)
            .unwrap_err()
            .to_string()
            .contains("outside"));
        assert!(sb
            .writable("/etc/passwd")
            .unwrap_err()
            .to_string()
            .contains("outside"));
        assert!(sb
            .readable("/")
            .unwrap_err()
            .to_string()
            .contains("outside"));
    }

    #[test]
    fn symlinks_leading_out_are_refused() {
        let (work, outside, sb) = tree();
        std::os::unix::fs::symlink(outside.path().join("secret"), work.path().join("link"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), work.path().join("dir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("nothing"), work.path().join("dangling"))
            .unwrap();
        assert!(sb
            .readable("link")
            .unwrap_err()
            .to_string()
            .contains("outside"));
        assert!(sb
            .writable("link")
            .unwrap_err()
            .to_string()
            .contains("outside"));
        assert!(sb
            .writable("dir/new.txt")
            .unwrap_err()
            .to_string()
            .contains("outside"));
        assert!(sb
            .readable("dir/secret")
            .unwrap_err()
            .to_string()
            .contains("outside"));
        assert!(sb
            .writable("dangling")
            .unwrap_err()
            .to_string()
            .contains("missing target"));
        // A symlink that stays inside is followed.
        std::os::unix::fs::symlink(work.path().join("src"), work.path().join("code")).unwrap();
        assert!(sb.readable("code/lib.rs").is_ok());
    }

    #[test]
    fn git_is_never_written() {
        let (work, _o, sb) = tree();
        std::fs::create_dir_all(work.path().join(".git")).unwrap();
        assert!(sb
            .writable(".git/config")
            .unwrap_err()
            .to_string()
            .contains(".git"));
        assert!(sb
            .writable(".git")
            .unwrap_err()
            .to_string()
            .contains(".git"));
        assert!(sb.readable(".git/config").is_ok());
    }

    #[test]
    fn planning_writes_only_its_files_and_reads_the_project() {
        let work = tempfile::tempdir().unwrap();
        let session = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join("README.md"), "# x\n").unwrap();
        let out = session.path().join("strategy.json");
        let sb = Sandbox::new(work.path(), Writable::Only(vec![out.clone()])).unwrap();
        assert!(sb.readable("README.md").is_ok());
        assert!(sb
            .writable("README.md")
            .unwrap_err()
            .to_string()
            .contains("may write only"));
        let shown = out.display().to_string();
        assert!(sb.writable(&shown).is_ok(), "{:?}", sb.writable(&shown));
        // Once written, the file may be read back although it is outside.
        std::fs::write(&out, "{}").unwrap();
        assert!(sb.readable(&shown).is_ok());
        assert!(sb
            .readable(&session.path().join("other").display().to_string())
            .is_err());
    }

    #[test]
    fn empty_and_nul_paths_are_errors() {
        let (_w, _o, sb) = tree();
        assert!(sb.readable("").is_err());
        assert!(sb.writable("a\0b").is_err());
    }
}
