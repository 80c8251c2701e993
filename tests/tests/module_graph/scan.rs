//! The scan of a crate's module files: their `crate::`/`super::` paths resolved to modules, what
//! each file defines and re-exports, the graph of uses and its cycles (rules 1 and 2).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub(crate) type Module = Vec<String>;

/// The module a `::`-separated path names (`""`: the crate root).
pub(crate) fn m(s: &str) -> Module {
    s.split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Every module file under `src` (binaries, which are their own crates, left out).
pub(crate) fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
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
pub(crate) fn code(text: &str) -> String {
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

pub(crate) fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A token of code: an identifier, `::`, or one other character; with its byte offset and the
/// brace depth it stands at (a `{` at the depth outside it, its `}` likewise).
#[derive(Debug, Clone)]
pub(crate) struct Token<'a> {
    pub(crate) text: &'a str,
    pub(crate) at: usize,
    pub(crate) depth: usize,
}

pub(crate) fn tokens(code: &str) -> Vec<Token<'_>> {
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
pub(crate) fn inline_modules(toks: &[Token]) -> Vec<(usize, usize, Module)> {
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
pub(crate) fn scope_at(module: &Module, inline: &[(usize, usize, Module)], at: usize) -> Module {
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
pub(crate) fn paths_at(text: &str, base: &[String]) -> Vec<Vec<String>> {
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
pub(crate) fn deepest(path: &[String], all: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| all.contains_key(m))
}

/// One `crate::…` or `super::…` path in a file: the line it is on, the full path it names and
/// the module file that holds it.
#[derive(Debug)]
pub(crate) struct Ref {
    pub(crate) line: usize,
    pub(crate) path: Vec<String>,
    pub(crate) target: Module,
}

pub(crate) fn refs(module: &Module, text: &str, all: &BTreeMap<Module, PathBuf>) -> Vec<Ref> {
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
pub(crate) fn uses(
    module: &Module,
    text: &str,
    all: &BTreeMap<Module, PathBuf>,
) -> BTreeSet<Module> {
    refs(module, text, all)
        .into_iter()
        .map(|r| r.target)
        .filter(|t| t != module)
        .collect()
}

/// What a file puts in its module: the items it defines and the names it imports.
#[derive(Debug, Default)]
pub(crate) struct Items {
    /// Names of the items defined at the top level (inline modules included).
    pub(crate) defined: BTreeSet<String>,
    /// Imports at the top level: the name bound (`*` for a glob) and the path it names,
    /// absolute in the crate (`None`: another crate's).
    pub(crate) imported: Vec<(String, Option<Vec<String>>)>,
}

pub(crate) const ITEM_KINDS: &[&str] = &[
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
pub(crate) fn use_tree(toks: &[&str], prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
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

pub(crate) fn items(module: &Module, text: &str, all: &BTreeMap<Module, PathBuf>) -> Items {
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
pub(crate) fn origin(
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

pub(crate) struct Crate {
    pub(crate) all: BTreeMap<Module, PathBuf>,
    pub(crate) text: BTreeMap<Module, String>,
    pub(crate) items: BTreeMap<Module, Items>,
    pub(crate) root: PathBuf,
}

impl Crate {
    pub(crate) fn read(src: &Path) -> Crate {
        let all = modules(src);
        let text: BTreeMap<Module, String> = all
            .iter()
            .map(|(m, p)| (m.clone(), std::fs::read_to_string(p).unwrap()))
            .collect();
        Crate::new(all, text, src)
    }

    pub(crate) fn new(
        all: BTreeMap<Module, PathBuf>,
        text: BTreeMap<Module, String>,
        src: &Path,
    ) -> Crate {
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

    pub(crate) fn file(&self, m: &Module) -> String {
        let p = &self.all[m];
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    /// The module file that defines what `r` names: its target, or where the target's file
    /// imports the name from (a re-export), followed through up to 8 files.
    pub(crate) fn resolve(&self, r: &Ref) -> Module {
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
    pub(crate) fn parent_uses(&self, module: &Module) -> Vec<String> {
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
    pub(crate) fn graph(&self) -> BTreeMap<Module, BTreeSet<Module>> {
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
pub(crate) fn is_unit_test_of(module: &Module, parent: &Module) -> bool {
    module.last().is_some_and(|l| l == "tests") && module[..module.len() - 1] == parent[..]
}

pub(crate) fn related(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// One cycle in the graph (edges between a module and its ancestors left out), if any.
pub(crate) fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
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

pub(crate) fn show(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}
