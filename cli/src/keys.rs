//! The cluster key files: writing a new one (`mcast keygen`) and reading the
//! configured ones at mcastd's start, refusing a file that anyone but the
//! daemon's user could read (docs/mcastd.md "Authentication").
//!
//! Owns: key files on disk and their permission rules. May not touch: the
//! key format (`mcast_engine::auth::ClusterKey`) or the frames.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use mcast_engine::auth::{ClusterKey, Keys};

use crate::config::Config;

/// Writes a new random key to `path`, created with mode 0600 (owner read
/// and write only). Refuses to replace an existing file unless `force`.
/// Returns the new key's id.
pub fn write_key_file(path: &Path, force: bool) -> Result<ClusterKey, String> {
    let text = ClusterKey::generate_text().map_err(|e| e.to_string())?;
    let key = ClusterKey::parse(&text).map_err(|e| e.to_string())?;
    let mut opts = OpenOptions::new();
    opts.write(true).mode(0o600);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => format!(
            "{} exists: a cluster key is never overwritten by accident (pass --force to replace it; every node needs the same key)",
            path.display()
        ),
        _ => format!("cannot create {}: {e}", path.display()),
    })?;
    // A replaced file keeps its old mode: make sure of 0600.
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(key)
}

/// The uid this process runs as (the owner of `/proc/self`, which is the
/// effective uid: no libc call needed).
fn own_uid() -> Result<u32, String> {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .map_err(|e| format!("cannot read /proc/self to learn the daemon's uid: {e}"))
}

/// Reads the key file `path` (configuration key `key`), which must belong to
/// the daemon's user and be unreadable by anyone else.
pub fn read_key_file(path: &Path, key: &str) -> Result<ClusterKey, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("{key} = {shown:?}: cannot read the cluster key ({e}); create one with `mcast keygen {shown}` and copy it to every node"))?;
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{key} = {shown:?} has mode {mode:04o}: others can read the cluster key; run `chmod 600 {shown}`"
        ));
    }
    let uid = own_uid()?;
    if meta.uid() != uid {
        return Err(format!(
            "{key} = {shown:?} belongs to uid {}, not to the daemon's user (uid {uid}): run `chown {uid} {shown}`",
            meta.uid()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{key} = {shown:?}: cannot read the cluster key ({e})"))?;
    ClusterKey::parse(&text).map_err(|e| format!("{key} = {shown:?}: {e}"))
}

/// The keys the configuration names: `None` when it says `insecure = true`
/// (validation has made sure that one of the two is set).
pub fn load(cfg: &Config) -> Result<Option<Keys>, String> {
    let Some(path) = &cfg.key_file else {
        return Ok(None);
    };
    let send = read_key_file(path, "key_file")?;
    let also = cfg
        .accept_key_file
        .as_deref()
        .map(|p| read_key_file(p, "accept_key_file"))
        .transpose()?;
    Ok(Some(Keys::new(send, also)))
}

/// One line for logs and `mcast stat`: how this node authenticates frames.
pub fn describe(keys: Option<&Keys>) -> String {
    match keys {
        None => "INSECURE: frames are not authenticated (insecure = true); any host on the segment can forge them".to_owned(),
        Some(k) => match k.also() {
            None => format!("frames are authenticated with key {}", k.send().id_hex()),
            Some(a) => format!(
                "frames are authenticated with key {}, and key {} is accepted too",
                k.send().id_hex(),
                a.id_hex()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("mcast-keys-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_written_key_reads_back_and_is_never_overwritten_by_accident() {
        let d = dir("roundtrip");
        let p = d.join("cluster.key");
        let k = write_key_file(&p, false).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_key_file(&p, "key_file").unwrap(), k);
        let e = write_key_file(&p, false).unwrap_err();
        assert!(e.contains("--force"), "{e}");
        assert_eq!(read_key_file(&p, "key_file").unwrap(), k, "unchanged");
        let k2 = write_key_file(&p, true).unwrap();
        assert_ne!(k2, k);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_key_others_can_read_is_refused_with_the_fix() {
        let d = dir("mode");
        let p = d.join("cluster.key");
        write_key_file(&p, false).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = read_key_file(&p, "key_file").unwrap_err();
        assert!(e.contains("mode 0640") && e.contains("chmod 600"), "{e}");
        // --force restores 0600 on the replaced file.
        write_key_file(&p, true).unwrap();
        assert!(read_key_file(&p, "key_file").is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_and_malformed_key_files_say_what_to_do() {
        let d = dir("bad");
        let e = read_key_file(&d.join("none.key"), "key_file").unwrap_err();
        assert!(e.contains("mcast keygen"), "{e}");
        let p = d.join("bad.key");
        std::fs::write(&p, "not a key\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = read_key_file(&p, "accept_key_file").unwrap_err();
        assert!(
            e.starts_with("accept_key_file = ") && e.contains("64 hexadecimal"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn describe_says_insecure_loudly_and_names_key_ids_only() {
        assert!(describe(None).starts_with("INSECURE"));
        let k = ClusterKey::from_bytes(&[5; 32]);
        let s = describe(Some(&Keys::new(k.clone(), None)));
        assert!(s.contains(&k.id_hex()), "{s}");
    }
}
