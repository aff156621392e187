//! Finding the libmcast cargo built for these tests and compiling C against it.
//! Also used by the namespace tests of mcastd (cli/tests/c_events.rs), whose
//! crate does not depend on mcast-ffi: they build it with [`build_library`].
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// mcast-ffi's directory (for `include/` and `examples/`), found from the
/// directory of the crate whose test this is, in the same workspace.
pub fn crate_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("engine/ffi"))
        .find(|d| d.join("include/mcast.h").exists())
        .expect("engine/ffi/include/mcast.h not found above CARGO_MANIFEST_DIR")
}

/// Builds libmcast (shared and static) with the cargo running this test,
/// into this test's target directory and profile, where [`lib_dir`] finds
/// it: for tests of a crate that does not depend on mcast-ffi. Cargo holds
/// no lock while the tests run, and an up-to-date library costs a check.
pub fn build_library() {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("profile dir");
    let target = profile_dir.parent().expect("target dir");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "mcast-ffi", "--lib", "--target-dir"])
        .arg(target);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
        None => panic!("no profile in {}", exe.display()),
    }
    let o = cmd.output().expect("run cargo");
    assert!(
        o.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
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
