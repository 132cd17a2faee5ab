//! A scratch directory per test, under the system's temp directory.

use std::path::{Path, PathBuf};

/// A fresh directory named after the test and the process; removed when dropped, except while
/// the test is panicking (a failed test's files stay to be looked at).
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// A fresh, empty directory for the test `name`.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("oomscope-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the temp directory is writable");
        Scratch { dir }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A path inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes a file inside it; returns its path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("the scratch directory is writable");
        path
    }

    /// Writes a script (any text) inside it; returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        self.write(name, body)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
