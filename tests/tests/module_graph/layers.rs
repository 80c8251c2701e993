//! Rule 3: the layers the modules keep, as declared here and drawn in `docs/architecture.md`.

use std::collections::BTreeSet;

use super::scan::{m, refs, show, Crate, Module};

/// The layers of the modules below one module of a crate (its children), lowest first.
pub(crate) struct Layers {
    pub(crate) krate: &'static str,
    /// The module whose children are layered (`""`: the crate root's).
    pub(crate) scope: &'static str,
    pub(crate) layers: &'static [&'static [&'static str]],
}

/// Rule 3: the layers the docs draw (`docs/architecture.md`, "The module graph and its
/// rules"). A module may use only modules of lower layers: not one of its own layer, not one
/// above.
pub(crate) const LAYERS: &[Layers] = &[
    Layers {
        krate: "adapter",
        scope: "",
        layers: &[
            &["hostfile", "runtime", "settings", "text", "workload"],
            &["protocol"],
            &["profile", "workflow"],
            &["agent", "discovery"],
            &["launch"],
            &["manifest", "rsh", "trainjob"],
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
                "rank_output",
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
    pub(crate) fn layer_of(&self, name: &str) -> Option<usize> {
        self.layers.iter().position(|l| l.contains(&name))
    }

    /// The child of the scope `m` lies in, if any (`m` below the scope, not the scope's own
    /// unit tests).
    pub(crate) fn child_of<'m>(&self, m: &'m Module) -> Option<&'m str> {
        let scope = self.scope_module();
        let child = m.get(scope.len()).filter(|_| m.starts_with(&scope))?;
        (child != "tests").then_some(child.as_str())
    }

    pub(crate) fn scope_module(&self) -> Module {
        m(self.scope)
    }

    /// What the layers are of, for messages.
    pub(crate) fn name(&self) -> &'static str {
        if self.scope.is_empty() {
            "the crate"
        } else {
            self.scope
        }
    }

    /// Whether a module of layer `from` may use one of layer `to`.
    pub(crate) fn allows(&self, from: &str, to: &str) -> bool {
        match (self.layer_of(from), self.layer_of(to)) {
            (Some(f), Some(t)) => t < f,
            _ => false,
        }
    }
}

impl Crate {
    /// Rule 3: the uses of a module of a higher or the same layer, one line each, and the
    /// children of the scope no layer declares.
    pub(crate) fn layer_breaches(&self, layers: &Layers) -> Vec<String> {
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
                "{}: no layer declares it (add it to the layers of {} in module_graph/layers.rs and \
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
