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

/// The Markdown files whose links are checked: the README, `prrte-config/README.md` and every
/// file in `docs/`, relative to the repository's root.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![
        PathBuf::from("README.md"),
        PathBuf::from("prrte-config/README.md"),
    ];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            out.push(Path::new("docs").join(name));
        }
    }
    out.sort();
    out
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The anchors of a Markdown file's headings, as GitHub makes them: lower case, of the
/// punctuation only `-` and `_` kept, spaces made `-`, a repeated one suffixed `-1`, `-2`...
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for line in prose(text).lines() {
        let title = line.trim_start_matches('#');
        if title.len() == line.len() || title.len() + 6 < line.len() || !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = out
            .iter()
            .filter(|a| **a == slug || a.strip_prefix(&slug).is_some_and(is_suffix))
            .count();
        out.push(if n == 0 { slug } else { format!("{slug}-{n}") });
    }
    out
}

/// Whether `rest` is the `-N` GitHub appends to a repeated heading's anchor.
fn is_suffix(rest: &str) -> bool {
    rest.strip_prefix('-')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The targets of the inline links `[text](target)` in a Markdown file's prose.
fn links(text: &str) -> Vec<String> {
    prose(text)
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(t, _)| t.to_owned()))
        .filter(|t| !t.contains(char::is_whitespace))
        .collect()
}

/// Whether the link `target` in the file `from` (relative to `root`) leads somewhere: a file or
/// folder that exists and, after a `#`, a heading of that Markdown file (or of `from` itself).
fn resolves(root: &Path, from: &Path, target: &str) -> Result<(), String> {
    if target.starts_with("https://") || target.starts_with("http://") {
        return Ok(());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        root.join(from)
    } else {
        root.join(from).parent().unwrap().join(path)
    };
    if !file.exists() {
        return Err(format!("{}: {target}: no such file", from.display()));
    }
    match anchor {
        Some(a)
            if !anchors(&std::fs::read_to_string(&file).unwrap())
                .iter()
                .any(|h| h == a) =>
        {
            Err(format!(
                "{}: {target}: no heading has that anchor",
                from.display()
            ))
        }
        _ => Ok(()),
    }
}

#[test]
fn every_link_of_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let files = markdown_files(root);
    assert!(
        files.iter().any(|f| f == Path::new("docs/architecture.md")),
        "{files:?}"
    );
    let mut checked = 0;
    let mut broken = vec![];
    for f in &files {
        for target in links(&std::fs::read_to_string(root.join(f)).unwrap()) {
            checked += 1;
            if let Err(e) = resolves(root, f, &target) {
                broken.push(e);
            }
        }
    }
    assert!(checked > 50, "links found: {checked}");
    assert!(broken.is_empty(), "links that lead nowhere: {broken:#?}");
}

/// The anchors are GitHub's, and the check tells a link that leads somewhere from one that
/// does not.
#[test]
fn the_link_check_tells_good_links_from_broken_ones() {
    let text =
        "# Title\n## The `k8s` PLM: prun, grow\n## A / B\n## Title\n```\n## not a heading\n```\n\
                [a](#the-k8s-plm-prun-grow) [b](x.md) `code` [c](#nope)\n";
    assert_eq!(
        anchors(text),
        ["title", "the-k8s-plm-prun-grow", "a--b", "title-1"]
    );
    assert_eq!(links(text), ["#the-k8s-plm-prun-grow", "x.md", "#nope"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/a.md"), text).unwrap();
    let from = Path::new("docs/a.md");
    let got: Vec<bool> = [
        "#the-k8s-plm-prun-grow",
        "#title-1",
        "a.md#a--b",
        "#nope",
        "x.md",
        "../docs/a.md",
        "https://example.org/x",
    ]
    .iter()
    .map(|t| resolves(dir.path(), from, t).is_ok())
    .collect();
    assert_eq!(got, [true, true, true, false, false, true, true]);
}
