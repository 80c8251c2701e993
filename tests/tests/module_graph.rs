//! Three rules for the modules of the crates (`adapter`, `cabi`, `tests`; the third for the adapter's):
//!
//! 1. **No import cycles**, apart from a module and its own ancestors: a cycle between two
//!    files is where the layers of rule 3 break down.
//! 2. **A parent does not serve its children.** A module uses no item defined in the file of
//!    one of its ancestors (its parent, the parent's parent, up to the crate root). A parent
//!    names its children (`mod x;`) and may use them; if a child also reached back for the
//!    parent's own functions, types or constants, the two would form the cycle rule 1 cannot
//!    see (it has to let parents and children name each other). Such an item gets a file of
//!    its own that both import. An ancestor's file may also *re-export* an item (`pub use
//!    config::BatchConfig;`, or a private `use`, which a child can reach too); using it through
//!    the ancestor is judged by where the item comes from:
//!    - from a module of the ancestor's subtree outside the user's own branch (for
//!      `agent::batch`, a sibling such as `agent::config`, or `agent::config::x`): allowed.
//!      The ancestor is only a signpost there (its public face for other crates), and rule 1
//!      counts the use as one of the module that defines the item, so cycles between siblings
//!      still show.
//!    - from anywhere else (another part of the crate, another crate, the user's own branch):
//!      reported. The parent would be a hub that hands its children what they should import
//!      from where it is defined.
//!
//!    A glob import of an ancestor (`use super::*` outside an inline module) counts as using
//!    each of its items; `super::` inside an inline module (`mod tests { use super::*; }`)
//!    names that file's own module, as in Rust.
//!
//!    **Unit tests are exempt.** A child module named `tests` (`#[cfg(test)] mod tests;` with
//!    its code in `x/tests.rs`, beside `x.rs` or `x/mod.rs`) may use its parent's items, glob
//!    imports included: the parent's items are what it tests, and nothing imports a test module,
//!    so no cycle can come of it. Only its own parent's: a `tests` module reaching further up
//!    is judged as any other module.
//!
//! 3. **Layers.** The adapter's modules are layered as `docs/architecture.md` draws them
//!    ([`LAYERS`], lowest first): a module may use only modules of lower layers, not one of
//!    its own layer nor one above. The agent's children are layered the same way. A use counts
//!    as one of the module that defines the item (re-exports followed, as for rule 1); every
//!    module of a layered scope must be declared in a layer. So the agent, which starts prted
//!    for a launcher, uses none of the launcher's side (`launch`, `discovery`, `elastic`,
//!    `rsh`), and a launcher's own launches in the agent's pod (the DVM head, batch mode) are
//!    handed to the agent from above.
//!
//! The references come from the `crate::` and `super::` paths in each file's code (comments and
//! the insides of string literals are left out), each resolved to the deepest module file it
//! names and, for rule 1, on through that file's re-exports to the module that defines the item
//! (`super::exec::ExecArgs`, re-exported by `exec/mod.rs` from `exec/allowlist.rs`, is a use of
//! the latter). What a file defines and re-exports comes from the items at its top level.
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

/// The code of a file: comments and the insides of string and character literals blanked
/// (newlines kept, so lines still count), so that what is left is paths, items and braces.
fn code(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let ident_before = i > 0 && is_ident(c[i - 1]);
        match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => {
                while i < c.len() && c[i] != '\n' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            '/' if c.get(i + 1) == Some(&'*') => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        out.push_str("  ");
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        out.push_str("  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                }
            }
            // Raw strings: r"…", r#"…"#, br"…".
            'r' if !ident_before
                || (i == 1 && c[0] == 'b')
                || (i >= 2 && c[i - 1] == 'b' && !is_ident(c[i - 2])) =>
            {
                let mut j = i + 1;
                while c.get(j) == Some(&'#') {
                    j += 1;
                }
                if c.get(j) != Some(&'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let hashes = j - i - 1;
                out.extend(&c[i..=j]);
                i = j + 1;
                while i < c.len() {
                    if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                        out.extend(&c[i..=i + hashes]);
                        i += hashes + 1;
                        break;
                    }
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            '"' => {
                out.push('"');
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' && i + 1 < c.len() {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    out.push('"');
                    i += 1;
                }
            }
            // A character literal ('x', '\n', '\u{7f}'), or else a lifetime ('a).
            '\'' if c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'') => {
                out.push('\'');
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    if c[i] == '\\' && i + 1 < c.len() {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    out.push('\'');
                    i += 1;
                }
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A token of code: an identifier, `::`, or one other character; with its byte offset and the
/// brace depth it stands at (a `{` at the depth outside it, its `}` likewise).
#[derive(Debug, Clone)]
struct Token<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

fn tokens(code: &str) -> Vec<Token<'_>> {
    let mut out = vec![];
    let mut depth = 0usize;
    let mut chars = code.char_indices().peekable();
    while let Some((at, ch)) = chars.next() {
        if ch.is_whitespace() {
            continue;
        }
        let lifetime = ch == '\'' && chars.peek().is_some_and(|&(_, c)| is_ident(c));
        let end = if is_ident(ch) || lifetime {
            let mut end = at + ch.len_utf8();
            while let Some(&(j, c)) = chars.peek() {
                if !is_ident(c) {
                    break;
                }
                end = j + c.len_utf8();
                chars.next();
            }
            end
        } else if ch == ':' && chars.peek().is_some_and(|&(_, c)| c == ':') {
            chars.next();
            at + 2
        } else {
            at + ch.len_utf8()
        };
        if ch == '}' {
            depth = depth.saturating_sub(1);
        }
        out.push(Token {
            text: &code[at..end],
            at,
            depth,
        });
        if ch == '{' {
            depth += 1;
        }
    }
    out
}

/// The inline modules (`mod tests { … }`) of a file: where each opens and closes, and its path
/// below the file's module.
fn inline_modules(toks: &[Token]) -> Vec<(usize, usize, Module)> {
    let mut out = vec![];
    let mut open: Vec<(usize, usize, Module)> = vec![]; // (start, depth, path)
    for (i, t) in toks.iter().enumerate() {
        match t.text {
            "{" if i >= 2 && toks[i - 2].text == "mod" => {
                let mut path = open.last().map(|o| o.2.clone()).unwrap_or_default();
                path.push(toks[i - 1].text.to_string());
                open.push((t.at, t.depth, path));
            }
            "}" if open.last().is_some_and(|o| o.1 == t.depth) => {
                let (start, _, path) = open.pop().unwrap();
                out.push((start, t.at, path));
            }
            _ => {}
        }
    }
    out
}

/// The module path of the code at byte `at`: the file's module and the inline modules around.
fn scope_at(module: &Module, inline: &[(usize, usize, Module)], at: usize) -> Module {
    let mut scope = module.clone();
    if let Some((_, _, path)) = inline
        .iter()
        .filter(|(s, e, _)| *s < at && at < *e)
        .max_by_key(|(_, _, p)| p.len())
    {
        scope.extend(path.iter().cloned());
    }
    scope
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
            if next.starts_with('*') {
                segs.push("*".into());
                return vec![segs];
            }
            rest = next;
        } else {
            return vec![segs];
        }
    }
}

/// The deepest module file `path` names.
fn deepest(path: &[String], all: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| all.contains_key(m))
}

/// One `crate::…` or `super::…` path in a file: the line it is on, the full path it names and
/// the module file that holds it.
#[derive(Debug)]
struct Ref {
    line: usize,
    path: Vec<String>,
    target: Module,
}

fn refs(module: &Module, text: &str, all: &BTreeMap<Module, PathBuf>) -> Vec<Ref> {
    let text = code(text);
    let inline = inline_modules(&tokens(&text));
    let mut out = vec![];
    for prefix in ["crate::", "super::"] {
        for (i, _) in text.match_indices(prefix) {
            if text[..i].ends_with(is_ident) || text[..i].ends_with("::") {
                continue; // part of a longer path (`x::super::`) or identifier
            }
            let base = scope_at(module, &inline, i);
            let line = text[..i].matches('\n').count() + 1;
            for path in paths_at(&text[i..], &base) {
                if let Some(target) = deepest(&path, all) {
                    out.push(Ref { line, path, target });
                }
            }
        }
    }
    out.sort_by_key(|r| r.line);
    out
}

/// The other modules `module`'s file uses.
fn uses(module: &Module, text: &str, all: &BTreeMap<Module, PathBuf>) -> BTreeSet<Module> {
    refs(module, text, all)
        .into_iter()
        .map(|r| r.target)
        .filter(|t| t != module)
        .collect()
}

/// What a file puts in its module: the items it defines and the names it imports.
#[derive(Debug, Default)]
struct Items {
    /// Names of the items defined at the top level (inline modules included).
    defined: BTreeSet<String>,
    /// Imports at the top level: the name bound (`*` for a glob) and the path it names,
    /// absolute in the crate (`None`: another crate's).
    imported: Vec<(String, Option<Vec<String>>)>,
}

const ITEM_KINDS: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "union",
    "trait",
    "type",
    "const",
    "static",
    "mod",
    "macro_rules",
];

/// The flat paths of a `use` tree (the tokens between `use` and `;`), each with its binding.
fn use_tree(toks: &[&str], prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
    let mut path = prefix.to_vec();
    let mut i = 0;
    while i < toks.len() {
        match toks[i] {
            "::" => {}
            "{" => {
                // Split the group at its top-level commas.
                let mut depth = 0;
                let mut start = i + 1;
                let mut j = i + 1;
                while j < toks.len() {
                    match toks[j] {
                        "{" => depth += 1,
                        "}" if depth == 0 => break,
                        "}" => depth -= 1,
                        "," if depth == 0 => {
                            use_tree(&toks[start..j], &path, out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                use_tree(&toks[start..j], &path, out);
                return;
            }
            "*" => {
                out.push(("*".into(), path));
                return;
            }
            "as" => {
                if let Some(alias) = toks.get(i + 1) {
                    out.push((alias.to_string(), path));
                }
                return;
            }
            "self" if i == 0 && !prefix.is_empty() => {} // `a::{self, …}`
            seg => path.push(seg.to_string()),
        }
        i += 1;
    }
    if let Some(last) = path.last() {
        let name = if toks.first() == Some(&"self") {
            prefix.last().cloned().unwrap_or_default()
        } else {
            last.clone()
        };
        if !name.is_empty() && name != "self" {
            out.push((name, path));
        }
    }
}

fn items(module: &Module, text: &str, all: &BTreeMap<Module, PathBuf>) -> Items {
    let text = code(text);
    let toks = tokens(&text);
    let mut out = Items::default();
    let mut uses = vec![];
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        let start_of_item = i == 0 || matches!(toks[i - 1].text, ";" | "}" | "]" | ")" | "pub");
        if t.depth == 0 && t.text == "use" && start_of_item {
            let end = (i..toks.len())
                .find(|&j| toks[j].text == ";")
                .unwrap_or(toks.len());
            let tree: Vec<&str> = toks[i + 1..end].iter().map(|t| t.text).collect();
            use_tree(&tree, &[], &mut uses);
            i = end;
            continue;
        }
        if t.depth == 0 && ITEM_KINDS.contains(&t.text) {
            let mut j = i + 1;
            while toks
                .get(j)
                .is_some_and(|n| matches!(n.text, "!" | "mut" | "fn" | "unsafe" | "async"))
            {
                j += 1;
            }
            if let Some(name) = toks.get(j).filter(|n| n.text.starts_with(is_ident)) {
                let file_module = t.text == "mod" && toks.get(j + 1).is_some_and(|n| n.text == ";");
                if !file_module {
                    out.defined.insert(name.text.to_string());
                }
            }
        }
        i += 1;
    }
    for (name, path) in uses {
        let absolute = match path.first().map(String::as_str) {
            Some("crate") => Some(path[1..].to_vec()),
            Some("self") => Some(module.iter().chain(&path[1..]).cloned().collect()),
            Some("super") => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                let base = &module[..module.len().saturating_sub(ups)];
                Some(base.iter().chain(&path[ups..]).cloned().collect())
            }
            Some(first) => {
                let child: Module = module.iter().cloned().chain([first.to_string()]).collect();
                if all.contains_key(&child) || out.defined.contains(first) {
                    Some(module.iter().chain(&path).cloned().collect())
                } else {
                    None // another crate (std, tokio, …)
                }
            }
            None => continue,
        };
        out.imported.push((name, absolute));
    }
    out
}

/// Where the item `name` of `ancestor`'s file comes from: `Ok(Some(m))` re-exported from
/// module `m` of the crate, `Ok(None)` from another crate, `Err(())` defined in the file, or
/// unknown (`Err` too: the checker then cannot tell, and says so).
fn origin(
    name: &str,
    ancestor: &Items,
    all: &BTreeMap<Module, PathBuf>,
) -> Result<Option<Module>, String> {
    if ancestor.defined.contains(name) {
        return Err("is defined there".into());
    }
    let named = ancestor.imported.iter().find(|(n, _)| n == name);
    let glob = || ancestor.imported.iter().find(|(n, _)| n == "*");
    match named.or_else(glob) {
        Some((_, Some(path))) => Ok(deepest(path, all)),
        Some((_, None)) => Ok(None),
        None => Err("is neither defined nor imported there (as far as this checker sees)".into()),
    }
}

struct Crate {
    all: BTreeMap<Module, PathBuf>,
    text: BTreeMap<Module, String>,
    items: BTreeMap<Module, Items>,
    root: PathBuf,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let all = modules(src);
        let text: BTreeMap<Module, String> = all
            .iter()
            .map(|(m, p)| (m.clone(), std::fs::read_to_string(p).unwrap()))
            .collect();
        Crate::new(all, text, src)
    }

    fn new(all: BTreeMap<Module, PathBuf>, text: BTreeMap<Module, String>, src: &Path) -> Crate {
        let items = text
            .iter()
            .map(|(m, t)| (m.clone(), items(m, t, &all)))
            .collect();
        Crate {
            all,
            text,
            items,
            root: src.to_path_buf(),
        }
    }

    fn file(&self, m: &Module) -> String {
        let p = &self.all[m];
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    /// The module file that defines what `r` names: its target, or where the target's file
    /// imports the name from (a re-export), followed through up to 8 files.
    fn resolve(&self, r: &Ref) -> Module {
        let (mut path, mut target) = (r.path.clone(), r.target.clone());
        for _ in 0..8 {
            let Some(name) = path.get(target.len()) else {
                break;
            };
            let items = &self.items[&target];
            if items.defined.contains(name) {
                break;
            }
            let Some((_, Some(src))) = items.imported.iter().find(|(n, _)| n == name) else {
                break;
            };
            let next: Vec<String> = src
                .iter()
                .chain(&path[target.len() + 1..])
                .cloned()
                .collect();
            match deepest(&next, &self.all) {
                Some(t) if t != target => (path, target) = (next, t),
                _ => break,
            }
        }
        target
    }

    /// Rule 2: the uses of an ancestor's items, one line each.
    fn parent_uses(&self, module: &Module) -> Vec<String> {
        let mut found = vec![];
        for r in refs(module, &self.text[module], &self.all) {
            let t = &r.target;
            if !(module.starts_with(t) && module != t) || r.path.len() <= t.len() {
                continue; // not an ancestor, or the ancestor module itself
            }
            if is_unit_test_of(module, t) {
                continue;
            }
            let name = &r.path[t.len()];
            let branch = &module[..t.len() + 1];
            let shown = format!("{}:{}: `{}`", self.file(module), r.line, r.path.join("::"));
            let ancestor = &self.items[t];
            if name == "self" {
                continue;
            }
            if name == "*" {
                if !ancestor.defined.is_empty() || !ancestor.imported.is_empty() {
                    found.push(format!(
                        "{shown}: a glob import of {} takes the items of {}",
                        show(t),
                        self.file(t)
                    ));
                }
                continue;
            }
            match origin(name, ancestor, &self.all) {
                Err(why) => found.push(format!("{shown}: `{name}` {why} ({})", self.file(t))),
                Ok(Some(src)) if src.starts_with(t) && src != *t && !src.starts_with(branch) => {}
                Ok(Some(src)) => found.push(format!(
                    "{shown}: {} re-exports `{name}` from {}; import it from there",
                    self.file(t),
                    show(&src)
                )),
                Ok(None) => found.push(format!(
                    "{shown}: {} re-exports `{name}` from another crate; import it from there",
                    self.file(t)
                )),
            }
        }
        found
    }

    /// Rule 1's graph: each module and the modules that define what it uses.
    fn graph(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        self.all
            .keys()
            .map(|m| {
                let out = refs(m, &self.text[m], &self.all)
                    .iter()
                    .map(|r| self.resolve(r))
                    .filter(|t| t != m)
                    .collect();
                (m.clone(), out)
            })
            .collect()
    }
}

/// Whether `module` is the unit-test module (`tests`) of `parent`.
fn is_unit_test_of(module: &Module, parent: &Module) -> bool {
    module.last().is_some_and(|l| l == "tests") && module[..module.len() - 1] == parent[..]
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

fn show(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// The layers of the modules below one module of a crate (its children), lowest first.
struct Layers {
    krate: &'static str,
    /// The module whose children are layered (`""`: the crate root's).
    scope: &'static str,
    layers: &'static [&'static [&'static str]],
}

/// Rule 3: the layers the docs draw (`docs/architecture.md`, "The module graph and its
/// rules"). A module may use only modules of lower layers: not one of its own layer, not one
/// above.
const LAYERS: &[Layers] = &[
    Layers {
        krate: "adapter",
        scope: "",
        layers: &[
            &["hostfile", "runtime", "settings", "text", "workload"],
            &["protocol"],
            &["profile"],
            &["agent", "discovery"],
            &["launch"],
            &["manifest", "rsh"],
            &["bundle", "controller", "elastic"],
        ],
    },
    Layers {
        krate: "adapter",
        scope: "agent",
        layers: &[
            &[
                "config",
                "dvm_uri",
                "exit_status",
                "launch_policy",
                "limits",
                "metrics",
                "preempt",
                "proc_stat",
                "prted_cmd",
            ],
            &["cgroup", "health", "mpi"],
            &["checked_config", "tracking"],
            &["batch", "child_env", "handshake", "process"],
            &["exec", "launches"],
            &["conn"],
        ],
    },
];

impl Layers {
    /// The layer of the child `name` of the scope, if declared.
    fn layer_of(&self, name: &str) -> Option<usize> {
        self.layers.iter().position(|l| l.contains(&name))
    }

    /// The child of the scope `m` lies in, if any (`m` below the scope, not the scope's own
    /// unit tests).
    fn child_of<'m>(&self, m: &'m Module) -> Option<&'m str> {
        let scope = self.scope_module();
        let child = m.get(scope.len()).filter(|_| m.starts_with(&scope))?;
        (child != "tests").then_some(child.as_str())
    }

    fn scope_module(&self) -> Module {
        m(self.scope)
    }

    /// What the layers are of, for messages.
    fn name(&self) -> &'static str {
        if self.scope.is_empty() {
            "the crate"
        } else {
            self.scope
        }
    }

    /// Whether a module of layer `from` may use one of layer `to`.
    fn allows(&self, from: &str, to: &str) -> bool {
        match (self.layer_of(from), self.layer_of(to)) {
            (Some(f), Some(t)) => t < f,
            _ => false,
        }
    }
}

impl Crate {
    /// Rule 3: the uses of a module of a higher or the same layer, one line each, and the
    /// children of the scope no layer declares.
    fn layer_breaches(&self, layers: &Layers) -> Vec<String> {
        let scope = layers.scope_module();
        let shown = |name: &str| {
            let layer = layers
                .layer_of(name)
                .map_or("no layer".into(), |l| format!("layer {}", l + 1));
            format!(
                "{} ({layer})",
                show(&[scope.clone(), vec![name.into()]].concat())
            )
        };
        let mut found = vec![];
        let mut undeclared = BTreeSet::new();
        for module in self.all.keys() {
            let Some(from) = layers.child_of(module) else {
                continue;
            };
            if layers.layer_of(from).is_none() {
                undeclared.insert(from.to_string());
                continue;
            }
            for r in refs(module, &self.text[module], &self.all) {
                let target = self.resolve(&r);
                let Some(to) = layers.child_of(&target) else {
                    continue; // outside the scope, or the scope itself
                };
                if to == from || layers.allows(from, to) {
                    continue;
                }
                found.push(format!(
                    "{}:{}: `crate::{}`: {} uses {}; a module may use only modules of lower layers",
                    self.file(module),
                    r.line,
                    r.path.join("::"),
                    shown(from),
                    shown(to),
                ));
            }
        }
        found.extend(undeclared.into_iter().map(|u| {
            format!(
                "{}: no layer declares it (add it to the layers of {} in module_graph.rs and \
                 docs/architecture.md)",
                show(&[scope.clone(), vec![u]].concat()),
                if layers.scope.is_empty() {
                    "the crate"
                } else {
                    layers.scope
                }
            )
        }));
        found.dedup();
        found
    }
}

fn crates() -> Vec<(&'static str, Crate)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    ["adapter", "cabi", "tests"]
        .into_iter()
        .map(|k| (k, Crate::read(&root.join(k).join("src"))))
        .collect()
}

#[test]
fn no_import_cycles_between_modules() {
    let mut found = vec![];
    for (krate, c) in crates() {
        let graph = c.graph();
        assert!(graph.len() > 5, "{krate}: modules found: {}", graph.len());
        if let Some(cycle) = find_cycle(&graph) {
            let names: Vec<String> = cycle.iter().map(show).collect();
            found.push(format!("{krate}: {}", names.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

#[test]
fn no_module_uses_its_parents_items() {
    let mut found = vec![];
    for (krate, c) in crates() {
        for m in c.all.keys() {
            found.extend(
                c.parent_uses(m)
                    .into_iter()
                    .map(|f| format!("{krate}/src/{f}")),
            );
        }
    }
    assert!(
        found.is_empty(),
        "modules using items of their parent's file (move the item into a module of its own, \
         or import it from the module that defines it): {found:#?}"
    );
}

fn m(s: &str) -> Module {
    s.split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn modules_use_only_lower_layers() {
    let crates = crates();
    let mut found = vec![];
    for layers in LAYERS {
        let (_, c) = crates
            .iter()
            .find(|(k, _)| *k == layers.krate)
            .expect("a crate of the workspace");
        found.extend(
            c.layer_breaches(layers)
                .into_iter()
                .map(|f| format!("{}/src/{f}", layers.krate)),
        );
    }
    assert!(
        found.is_empty(),
        "modules using a module of their own or a higher layer (the layers are declared in \
         LAYERS and drawn in docs/architecture.md): {found:#?}"
    );
}

/// `docs/architecture.md` states the layers exactly as [`LAYERS`] declares them: each layer as
/// a numbered item listing its modules, the crate's first, then the agent's.
#[test]
fn the_docs_state_the_enforced_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let section = doc
        .split("\n## The module graph and its rules\n")
        .nth(1)
        .expect("docs/architecture.md has the module graph's section");
    let section = section.split("\n## ").next().unwrap();
    let text = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut at = 0;
    for layers in LAYERS {
        for (i, layer) in layers.layers.iter().enumerate() {
            let names: Vec<String> = layer.iter().map(|n| format!("`{n}`")).collect();
            let item = format!(" {}. {}", i + 1, names.join(", "));
            let found = text[at..]
                .match_indices(&item)
                .map(|(j, _)| at + j + item.len())
                .find(|&end| !text[end..].starts_with(','));
            let Some(end) = found else {
                panic!(
                    "docs/architecture.md does not state layer {} of {} as {item:?} (after what \
                     it states before)",
                    i + 1,
                    layers.name()
                );
            };
            at = end;
        }
    }
}

/// The layers keep the agent below the launcher: it uses none of the launcher's side.
#[test]
fn the_agent_is_below_the_launcher() {
    let crate_layers = &LAYERS[0];
    assert_eq!((crate_layers.krate, crate_layers.scope), ("adapter", ""));
    for above in [
        "launch",
        "discovery",
        "elastic",
        "rsh",
        "manifest",
        "controller",
    ] {
        assert!(
            !crate_layers.allows("agent", above),
            "agent may use {above}"
        );
    }
    for below in ["protocol", "profile", "settings", "hostfile", "text"] {
        assert!(
            crate_layers.allows("agent", below),
            "agent may not use {below}"
        );
    }
    assert!(crate_layers.allows("launch", "agent"));
}

/// The layer check reports a use of a higher layer and of the same one, by file, line and
/// path, and a module no layer declares; a use of a lower layer, of the module's own
/// descendants and of modules outside the scope passes.
#[test]
fn the_checker_finds_a_use_of_a_higher_layer() {
    let files = [
        ("", "mod low; mod mid; mod high; mod side; mod stray;"),
        ("low", "pub struct L;\nuse crate::mid::M;"),
        ("mid", "mod inner;\npub use inner::M;\nuse crate::low::L;"),
        (
            "mid::inner",
            "pub struct M;\nuse crate::low::L;\nuse super::super::side::S;",
        ),
        ("high", "use crate::mid::M;\nuse crate::low::L;"),
        ("side", "pub struct S;"),
        ("stray", "use crate::high::H;"),
    ];
    let all: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|(n, _)| (m(n), PathBuf::from(format!("{}.rs", n.replace("::", "/")))))
        .collect();
    let text = files.iter().map(|(n, t)| (m(n), t.to_string())).collect();
    let c = Crate::new(all, text, Path::new(""));
    let layers = Layers {
        krate: "x",
        scope: "",
        layers: &[&["low"], &["mid", "side"], &["high"]],
    };
    let found = c.layer_breaches(&layers);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(
        found[0],
        "low.rs:2: `crate::mid::M`: low (layer 1) uses mid (layer 2); a module may use only \
         modules of lower layers"
    );
    assert!(
        found[1].starts_with("mid/inner.rs:3: `crate::side::S`: mid (layer 2) uses side (layer 2)"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("stray: no layer declares it"),
        "{found:#?}"
    );
    // Layers of one module's children: uses outside it are the crate's layers' business.
    let inner = Layers {
        krate: "x",
        scope: "mid",
        layers: &[&["inner"]],
    };
    assert!(c.layer_breaches(&inner).is_empty());
    let none = Layers {
        krate: "x",
        scope: "mid",
        layers: &[],
    };
    let found = c.layer_breaches(&none);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("mid::inner: no layer declares it"),
        "{found:#?}"
    );
}

/// The checker sees a cycle when there is one, ignores parent/child imports and comments.
#[test]
fn the_checker_finds_a_cycle() {
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

/// The code scanner leaves out comments and string literals and knows inline modules.
#[test]
fn the_scanner_sees_only_code() {
    let text = "let s = \"crate::x { \\\" }\"; let r = r#\"super::y\"#; let c = '{';\n\
                /* crate::z /* nested */ */ fn f<'a>(x: &'a str) {}\nmod tests { use super::*; }";
    let code = code(text);
    assert!(!code.contains("crate::"), "{code}");
    assert!(!code.contains("super::y"), "{code}");
    assert_eq!(code.lines().count(), 3);
    assert!(code.contains("fn f<'a>(x: &'a str) {}"), "{code}");
    let toks = tokens(&code);
    assert_eq!(toks.last().unwrap().depth, 0, "braces balance: {toks:?}");
    let inline = inline_modules(&toks);
    assert_eq!(inline.len(), 1);
    let at = code.find("super::*").unwrap();
    assert_eq!(scope_at(&m("a::b"), &inline, at), m("a::b::tests"));
}

/// A parent's own items are reported when a child uses them; a sibling's item re-exported by
/// the parent is not (it counts as a use of the sibling), anything else re-exported is.
#[test]
fn the_checker_finds_a_parent_serving_its_children() {
    let files = [
        (
            "a",
            "mod x; mod y; mod z;\npub use y::Cfg;\nuse crate::b::Other;\npub use x::Mine;\n\
             pub use z::{self, Deep as Renamed};\n\
             pub(crate) fn helper() {}\nstruct Slot;\n#[cfg(test)] mod tests { use super::*; }",
        ),
        (
            "a::x",
            "use super::helper;\nuse super::{Cfg, Slot};\nuse crate::a::Other;\n\
             fn f() -> super::Mine { super::Renamed::new() }\n\
             #[cfg(test)] mod tests { use super::*; use super::super::Cfg; }",
        ),
        ("a::y", "pub struct Cfg;"),
        ("a::z", "pub struct Deep;"),
        ("b", "pub struct Other; use crate::a::Cfg;"),
        ("", "mod a; mod b;"),
    ];
    let all: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|(n, _)| (m(n), PathBuf::from(format!("{}.rs", n.replace("::", "/")))))
        .collect();
    let text = files.iter().map(|(n, t)| (m(n), t.to_string())).collect();
    let c = Crate::new(all, text, Path::new(""));
    let found = c.parent_uses(&m("a::x"));
    let lines: Vec<usize> = found
        .iter()
        .map(|f| f.split(':').nth(1).unwrap().parse().unwrap())
        .collect();
    // helper, Slot, Other (from b), Mine (x's own); not Cfg, Renamed, the tests' own glob.
    assert_eq!(lines, [1, 2, 3, 4], "{found:#?}");
    assert!(found[0].contains("`helper` is defined there"), "{found:#?}");
    assert!(found[1].contains("`Slot` is defined there"), "{found:#?}");
    assert!(found[2].contains("from b;"), "{found:#?}");
    assert!(found[3].contains("`Mine` from a::x"), "{found:#?}");
    // The graph follows re-exports to the module that defines the item.
    let graph = c.graph();
    assert_eq!(graph[&m("b")], [m("a::y")].into_iter().collect());
    assert!(graph[&m("a::x")].contains(&m("a::z")), "{graph:?}");
    assert!(graph[&m("a::x")].contains(&m("b")), "{graph:?}");
    // Modules that are not children of `a` are not judged by this rule.
    assert!(c.parent_uses(&m("b")).is_empty());
    // A glob import of the parent at the top of a child's file takes its items.
    let glob = "use super::*;\nfn g() {}";
    let mut c = c;
    c.text.insert(m("a::y"), glob.into());
    let found = c.parent_uses(&m("a::y"));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("glob import of a"), "{found:#?}");
}

/// A unit-test module (`tests`, in a file of its own) may use its parent's items, by name or
/// by a glob; not those of a module further up, and a module of another name may not either.
#[test]
fn unit_test_modules_may_use_their_parents_items() {
    let files = [
        ("", "mod a;"),
        (
            "a",
            "mod x;\n#[cfg(test)] mod tests;\npub(crate) fn helper() {}\nstruct Slot;",
        ),
        ("a::tests", "use super::*;\nuse super::{helper, Slot};"),
        (
            "a::x",
            "#[cfg(test)] mod tests;\nmod tested;\npub(crate) fn own() {}",
        ),
        ("a::x::tests", "use super::own;\nuse crate::a::helper;"),
        ("a::x::tested", "use super::own;"),
    ];
    let all: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|(n, _)| (m(n), PathBuf::from(format!("{}.rs", n.replace("::", "/")))))
        .collect();
    let text = files.iter().map(|(n, t)| (m(n), t.to_string())).collect();
    let c = Crate::new(all, text, Path::new(""));
    assert!(c.parent_uses(&m("a::tests")).is_empty());
    let found = c.parent_uses(&m("a::x::tests"));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("`helper` is defined there"), "{found:#?}");
    let found = c.parent_uses(&m("a::x::tested"));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("`own` is defined there"), "{found:#?}");
}
