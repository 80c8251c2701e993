//! `unsafe` lives only in cabi/, and each block there says why it is sound.
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Lines that open an unsafe block (not `unsafe extern "C" fn` types or `unsafe fn` items).
fn unsafe_blocks(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or("");
            code.match_indices("unsafe").any(|(i, _)| code[i + 6..].trim_start().starts_with('{'))
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn every_unsafe_block_in_cabi_has_a_safety_comment() {
    let mut files = Vec::new();
    rust_files(&repo().join("cabi/src"), &mut files);
    rust_files(&repo().join("cabi/tests"), &mut files);
    assert!(files.len() > 5, "found the sources");
    let mut missing = Vec::new();
    let mut count = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for i in unsafe_blocks(&text) {
            count += 1;
            let mut j = i;
            let mut ok = lines[i].contains("SAFETY:");
            while !ok && j > 0 && lines[j - 1].trim_start().starts_with("//") {
                j -= 1;
                ok = lines[j].contains("SAFETY:");
            }
            if !ok {
                missing.push(format!("{}:{}", f.strip_prefix(repo()).unwrap().display(), i + 1));
            }
        }
    }
    assert!(count > 20, "the scan finds cabi's unsafe blocks ({count})");
    assert!(missing.is_empty(), "unsafe blocks without a `// SAFETY:` comment above: {missing:?}");
}

#[test]
fn no_unsafe_outside_cabi() {
    let mut files = Vec::new();
    rust_files(&repo().join("adapter"), &mut files);
    rust_files(&repo().join("tests"), &mut files);
    assert!(files.len() > 10, "found the sources");
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| !unsafe_blocks(&std::fs::read_to_string(f).unwrap()).is_empty())
        .map(|f| f.strip_prefix(repo()).unwrap().display().to_string())
        .collect();
    assert!(offenders.is_empty(), "unsafe outside cabi/: {offenders:?}");
}
