//! Finding the libmcast cargo built for these tests and compiling C against it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crate's directory (for `include/` and `examples/`).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `libmcast.so` and `libmcast.a` of this build: a
/// test binary runs from `<target>/<profile>/deps/`, and cargo builds the
/// library's cdylib and staticlib before the tests that depend on it, into
/// that `deps/`. (`<profile>/` has copies only from `cargo build`, possibly
/// stale, so it is the fallback.)
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    let profile = deps.parent().expect("profile dir");
    for dir in [deps, profile] {
        if dir.join("libmcast.so").exists() && dir.join("libmcast.a").exists() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "libmcast.so and libmcast.a not found in {} or {}",
        profile.display(),
        deps.display()
    );
}

/// Compiles `sources` into the executable `out` with the warnings strict,
/// against the shared library (with an rpath to it) or the static one.
pub fn compile(sources: &[&Path], out: &Path, shared: bool) {
    let lib = lib_dir();
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args([
        "-std=c99",
        "-D_POSIX_C_SOURCE=200809L",
        "-Wall",
        "-Wextra",
        "-Werror",
    ])
    .arg("-I")
    .arg(crate_dir().join("include"))
    .args(sources)
    .arg("-o")
    .arg(out);
    if shared {
        cmd.arg(format!("-L{}", lib.display()))
            .arg("-lmcast")
            .arg(format!("-Wl,-rpath,{}", lib.display()));
    } else {
        // What `rustc --print native-static-libs` lists for std on Linux.
        cmd.arg(lib.join("libmcast.a")).args([
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ]);
    }
    let o = cmd.output().expect("run the C compiler");
    assert!(
        o.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
