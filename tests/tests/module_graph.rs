//! The modules of each crate import one another without cycles, apart from a parent module and
//! its own children: the data path reads one way (cabi → discovery → allocation → launch →
//! protocol ← agent → prted), and a cycle between two files is where that breaks down.
//!
//! The graph comes from the `crate::` and `super::` paths in each file's code (comments are left
//! out), each resolved to the deepest module file it names.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every module file under `src` (binaries, which are their own crates, left out).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().unwrap() != "bin" {
                    dirs.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    out
}

/// The code of a file without its line comments (doc comments name modules they do not use).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The module paths named by the path at the start of `text` (`crate::…` or `super::…`, from
/// module `base`). A `{a, b::c}` group gives one path per item.
fn paths_at(text: &str, base: &[String]) -> Vec<Vec<String>> {
    let mut segs: Vec<String> = base.to_vec();
    let mut rest = text;
    loop {
        let n = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let (ident, after) = rest.split_at(n);
        if !ident.is_empty() {
            if ident == "crate" {
                segs.clear();
            } else if ident == "super" {
                segs.pop();
            } else {
                segs.push(ident.to_string());
            }
        }
        if let Some(next) = after.strip_prefix("::") {
            if let Some(group) = next.strip_prefix('{') {
                // Items of the group, split at top-level commas.
                let mut depth = 0;
                let mut items = vec![];
                let mut start = 0;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            items.push(&group[start..i]);
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            items.push(&group[start..i]);
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                return items
                    .into_iter()
                    .flat_map(|item| paths_at(item.trim(), &segs))
                    .collect();
            }
            rest = next;
        } else {
            return vec![segs];
        }
    }
}

/// The other modules `module`'s file uses.
fn uses(module: &Module, text: &str, all: &BTreeMap<Module, PathBuf>) -> BTreeSet<Module> {
    let text = code(text);
    let mut out = BTreeSet::new();
    for prefix in ["crate::", "super::"] {
        for (i, _) in text.match_indices(prefix) {
            if text[..i].ends_with(is_ident) || text[..i].ends_with("::") {
                continue; // part of a longer path (`x::super::`) or identifier
            }
            let base: Module = if prefix == "crate::" {
                vec![]
            } else {
                module.clone()
            };
            for path in paths_at(&text[i..], &base) {
                // The deepest module file the path names.
                let target = (0..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|m| all.contains_key(m));
                if let Some(t) = target {
                    out.insert(t);
                }
            }
        }
    }
    out
}

fn related(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// One cycle in the graph (edges between a module and its ancestors left out), if any.
fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        marks.insert(m.clone(), Mark::Open);
        stack.push(m.clone());
        for next in graph[m].iter().filter(|n| !related(m, n)) {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let at = stack.iter().position(|s| s == next).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(c) = visit(next, graph, marks, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(m.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in graph.keys() {
        if !marks.contains_key(m) {
            if let Some(c) = visit(m, graph, &mut marks, &mut vec![]) {
                return Some(c);
            }
        }
    }
    None
}

fn graph_of(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let all = modules(src);
    all.iter()
        .map(|(m, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            (m.clone(), uses(m, &text, &all))
        })
        .collect()
}

fn show(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_import_cycles_between_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut found = vec![];
    for krate in ["adapter", "cabi", "tests"] {
        let graph = graph_of(&root.join(krate).join("src"));
        assert!(graph.len() > 5, "{krate}: modules found: {}", graph.len());
        if let Some(cycle) = find_cycle(&graph) {
            let names: Vec<String> = cycle.iter().map(show).collect();
            found.push(format!("{krate}: {}", names.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

/// The checker sees a cycle when there is one, ignores parent/child imports and comments.
#[test]
fn the_checker_finds_a_cycle() {
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    let all: BTreeMap<Module, PathBuf> = ["a", "a::x", "b", "c"]
        .iter()
        .map(|s| (m(s), PathBuf::new()))
        .collect();
    let a = uses(
        &m("a"),
        "use crate::{b::Thing, c};\n// crate::zzz\nuse self::x::Y;",
        &all,
    );
    assert_eq!(a, [m("b"), m("c")].into_iter().collect());
    let ax = uses(
        &m("a::x"),
        "use super::Z; fn f() { super::super::b::g() }",
        &all,
    );
    assert_eq!(ax, [m("a"), m("b")].into_iter().collect());
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    graph.insert(m("a"), [m("a::x"), m("b")].into_iter().collect());
    graph.insert(m("a::x"), [m("a")].into_iter().collect());
    graph.insert(m("b"), [m("c")].into_iter().collect());
    graph.insert(m("c"), BTreeSet::new());
    assert_eq!(
        find_cycle(&graph),
        None,
        "parent and child may use each other"
    );
    graph.insert(m("c"), [m("a")].into_iter().collect());
    let cycle = find_cycle(&graph).expect("a -> b -> c -> a is a cycle");
    assert!(
        cycle.contains(&m("b")) && cycle.contains(&m("c")),
        "{cycle:?}"
    );
}
