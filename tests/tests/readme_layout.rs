//! The layout table of `docs/architecture.md` names every folder of the repository down to
//! three levels (`adapter/src/agent`, `cabi/shim`, `tests/tests/common`...): as a row of its own
//! (`path/`, or a row below it such as `adapter/src/launch/` for `adapter/src`), or by its name
//! (`exec/`) in the row of the nearest folder above it that has one.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// The rows of the table under `## Layout`: the paths of the first column and the whole row.
fn rows(doc: &str) -> Vec<(Vec<String>, String)> {
    let section = doc
        .split("\n## Layout\n")
        .nth(1)
        .expect("docs/architecture.md has a ## Layout section");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let first = l.split(" | ").next().unwrap_or("");
            let paths = first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|p| p.trim_end_matches('*').trim_end_matches(".rs").to_owned())
                .collect();
            (paths, l.to_owned())
        })
        .collect()
}

/// The folders of the repository, relative, at most `depth` levels deep (build output, the
/// sandbox's state and hidden folders other than `.ci` left out).
fn folders(root: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut todo = vec![(PathBuf::new(), 0)];
    while let Some((rel, d)) = todo.pop() {
        if d == depth {
            continue;
        }
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.file_type().unwrap().is_dir()
                || name == "target"
                || (name.starts_with('.') && name != ".ci")
            {
                continue;
            }
            let path = rel.join(&name);
            out.push(path.clone());
            todo.push((path, d + 1));
        }
    }
    out.sort();
    out
}

/// Whether the table names `dir`; the reason when it does not.
fn named(dir: &Path, rows: &[(Vec<String>, String)]) -> Result<(), String> {
    let d = format!("{}/", dir.display());
    if rows
        .iter()
        .any(|(paths, _)| paths.iter().any(|p| p.starts_with(&d)))
    {
        return Ok(());
    }
    let name = format!("{}/", dir.file_name().unwrap().to_string_lossy());
    let mut up = dir.parent();
    while let Some(a) = up {
        let a_slash = format!("{}/", a.display());
        let own: Vec<&String> = rows
            .iter()
            .filter(|(paths, _)| {
                paths
                    .iter()
                    .any(|p| *p == a_slash || p == &a_slash[..a_slash.len() - 1])
            })
            .map(|(_, row)| row)
            .collect();
        if !own.is_empty() {
            return if own.iter().any(|row| {
                row.split('`')
                    .skip(1)
                    .step_by(2)
                    .any(|code| code.contains(&name))
            }) {
                Ok(())
            } else {
                Err(format!("{d}: not named in the row of {a_slash}"))
            };
        }
        up = a.parent().filter(|p| !p.as_os_str().is_empty());
    }
    Err(format!("{d}: no row names it or a folder above it"))
}

#[test]
fn the_layout_table_names_every_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let rows = rows(&doc);
    assert!(rows.len() > 10, "rows found: {rows:?}");
    let dirs = folders(root, 3);
    assert!(
        dirs.iter().any(|d| d == Path::new("adapter/src/launch")),
        "{dirs:?}"
    );
    let missing: Vec<String> = dirs.iter().filter_map(|d| named(d, &rows).err()).collect();
    assert!(
        missing.is_empty(),
        "folders the layout table of docs/architecture.md does not name (add a row, or name \
         them in their parent's row): {missing:#?}"
    );
}

/// The check finds a folder no row names, and accepts one named in its parent's row.
#[test]
fn the_check_tells_named_folders_from_others() {
    let doc = "x\n## Layout\n\n| path | what |\n| --- | --- |\n\
                  | `a/` | holds `b/` and `c.rs` |\n| `d/e/` | e |\n\n## Next\n| `z/` | z |\n";
    let rows = rows(doc);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(named(Path::new("a"), &rows).is_ok());
    assert!(named(Path::new("a/b"), &rows).is_ok());
    assert!(named(Path::new("a/c"), &rows).is_err());
    assert!(named(Path::new("d"), &rows).is_ok(), "a row below it");
    assert!(named(Path::new("d/e/f"), &rows).is_err());
    assert!(named(Path::new("z"), &rows).is_err(), "outside the section");
}

