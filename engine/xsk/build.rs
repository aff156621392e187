//! Compiles `ebpf/steer.bpf.c` with clang into `OUT_DIR/steer.bpf.o`, which
//! `src/loader.rs` embeds with `include_bytes!`. The program is C because
//! eBPF in Rust needs a nightly toolchain this project does not use
//! (shared/PLATFORM.md).

use std::env;
use std::path::PathBuf;
use std::process::Command;

const INSTALL_HINT: &str =
    "install the eBPF toolchain with: apt-get update && apt-get install -y clang llvm libbpf-dev";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let src = manifest_dir.join("../../ebpf/steer.bpf.c");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("steer.bpf.o");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CLANG");

    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    let multiarch = format!(
        "-I/usr/include/{}-linux-gnu",
        env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())
    );
    if !std::path::Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        panic!("mcast-xsk: /usr/include/bpf/bpf_helpers.h is missing (package libbpf-dev); {INSTALL_HINT}");
    }
    let output = Command::new(&clang)
        .args([
            "-O2", "-g", "-target", "bpf", "-Wall", "-Werror", &multiarch, "-c",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output();
    match output {
        Err(e) => panic!("mcast-xsk: cannot run `{clang}` ({e}); {INSTALL_HINT}"),
        Ok(o) if !o.status.success() => panic!(
            "mcast-xsk: `{clang}` failed to compile {}:\n{}\nIf headers are missing, {INSTALL_HINT}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
}
