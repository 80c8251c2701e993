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

mod layers;
mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use layers::{Layers, LAYERS};
use scan::*;

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
