//! The users and groups of an image's root filesystem.
use std::path::Path;

/// An `/etc/passwd` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// The entries of the image's `/etc/passwd` (none if it has none).
pub fn passwd(rootfs: &Path) -> Vec<PasswdEntry> {
    let text = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 7 {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
            })
        })
        .collect()
}

/// (name, gid, members) of the image's `/etc/group`.
pub fn groups(rootfs: &Path) -> Vec<(String, u32, Vec<String>)> {
    let text = std::fs::read_to_string(rootfs.join("etc/group")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4).then(|| {
                Some((
                    f[0].to_string(),
                    f[2].parse().ok()?,
                    f[3].split(',')
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect(),
                ))
            })?
        })
        .collect()
}
