//! Helpers shared by the unit tests (`src/tests.rs` includes this file) and
//! the integration tests of cascade-process: scripts in temp dirs, and the
//! pids they leave in files.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes an executable `#!/bin/sh` script `name` in `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The first `n` pids written to `path` (whitespace separated), waiting
/// (with a guard) until a script has written them.
pub fn pids_in(path: &Path, n: usize) -> Vec<u32> {
    for _ in 0..500 {
        let pids: Vec<u32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
        if pids.len() >= n {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("fewer than {n} pids in {}", path.display());
}

/// Whether `/proc` is missing (then what the tests check cannot be seen);
/// says so when it is.
pub fn no_proc() -> bool {
    if !Path::new("/proc/self/stat").exists() {
        println!("skipped: no /proc on this system, processes cannot be inspected");
        return true;
    }
    false
}
