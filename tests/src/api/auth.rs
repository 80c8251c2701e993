//! Bearer tokens and authorization: static rules per token, or RBAC objects from the store
//! for service-account tokens.

use super::resources::{CLUSTERROLEBINDINGS, CLUSTERROLES, ROLEBINDINGS, ROLES};
use super::store::{ListQuery, Store};
use serde_json::{json, Value};

/// One permission, like an RBAC PolicyRule: "*" is a wildcard in each list; resources may
/// name subresources ("pods/status", "*/status").
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
}

impl Rule {
    /// A rule from string slices.
    pub fn new(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            verbs: v(verbs),
            api_groups: v(api_groups),
            resources: v(resources),
        }
    }

    /// Every verb on every resource.
    pub fn all() -> Rule {
        Rule::new(&["*"], &["*"], &["*"])
    }

    /// A PolicyRule object: the rule and its resourceNames (None for non-resource rules).
    fn from_policy(v: &Value) -> Option<(Rule, Vec<String>)> {
        let strs = |k: &str| -> Vec<String> {
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        if v.get("nonResourceURLs").is_some() && v.get("resources").is_none() {
            return None;
        }
        Some((
            Rule {
                verbs: strs("verbs"),
                api_groups: strs("apiGroups"),
                resources: strs("resources"),
            },
            strs("resourceNames"),
        ))
    }

    pub fn to_json(&self) -> Value {
        json!({"verbs": self.verbs, "apiGroups": self.api_groups, "resources": self.resources})
    }

    pub fn allows(&self, a: &Attributes) -> bool {
        let any = |l: &[String], x: &str| l.iter().any(|s| s == "*" || s == x);
        if !any(&self.verbs, &a.verb) || !any(&self.api_groups, &a.group) {
            return false;
        }
        let full = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let res_ok = self.resources.iter().any(|r| {
            r == "*"
                || *r == full
                || (!a.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(a.subresource.as_str()))
        });
        res_ok
    }
}

/// What a request wants to do.
#[derive(Clone, Debug, Default)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Attributes {
    /// The message of a 403, worded as the real server does.
    pub fn forbidden_message(&self, user: &str) -> String {
        let full = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let what = match &self.name {
            Some(n) => format!("{full} \"{n}\""),
            None => full.clone(),
        };
        let scope = match &self.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        format!(
            "{what} is forbidden: User \"{user}\" cannot {} resource \"{full}\" in API group \"{}\" {scope}",
            self.verb, self.group
        )
    }
}

/// Whose token it is and where its rights come from.
#[derive(Clone, Debug)]
pub struct Identity {
    pub user: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub source: RightsSource,
}

#[derive(Clone, Debug)]
pub enum RightsSource {
    /// Fixed rules, valid in one namespace or (None) everywhere.
    Static {
        namespace: Option<String>,
        rules: Vec<Rule>,
    },
    /// RBAC objects in the store.
    Rbac,
}

/// A rule together with the namespace it is limited to (None = cluster-wide).
#[derive(Clone, Debug)]
pub struct ScopedRule {
    pub namespace: Option<String>,
    pub rule: Rule,
    /// Object names the rule is limited to (empty = all).
    pub resource_names: Vec<String>,
}

impl ScopedRule {
    fn plain(namespace: Option<String>, rule: Rule) -> ScopedRule {
        ScopedRule {
            namespace,
            rule,
            resource_names: Vec::new(),
        }
    }

    pub fn allows(&self, a: &Attributes) -> bool {
        self.rule.allows(a)
            && (self.namespace.is_none() || self.namespace == a.namespace)
            && (self.resource_names.is_empty()
                || a.name
                    .as_deref()
                    .is_some_and(|n| self.resource_names.iter().any(|r| r == n)))
    }
}

fn role_rules(store: &Store, kind: &str, ns: &str, name: &str) -> Vec<(Rule, Vec<String>)> {
    let obj = match kind {
        "Role" => store.get(&ROLES, ns, name).ok(),
        "ClusterRole" => store.get(&CLUSTERROLES, "", name).ok(),
        _ => None,
    };
    obj.and_then(|o| o.get("rules").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(Rule::from_policy)
        .collect()
}

fn subject_matches(id: &Identity, s: &Value, binding_ns: &str) -> bool {
    let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = s.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "ServiceAccount" => {
            let ns = s
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            id.user == format!("system:serviceaccount:{ns}:{name}")
        }
        "User" => id.user == name,
        "Group" => id.groups.iter().any(|g| g == name),
        _ => false,
    }
}

/// What every authenticated user may do (system:basic-user).
fn basic_user_rules() -> Vec<ScopedRule> {
    vec![
        ScopedRule::plain(
            None,
            Rule::new(
                &["create"],
                &["authorization.k8s.io"],
                &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            ),
        ),
        ScopedRule::plain(
            None,
            Rule::new(
                &["create"],
                &["authentication.k8s.io"],
                &["selfsubjectreviews"],
            ),
        ),
    ]
}

impl Identity {
    /// Every rule this identity holds, each with its namespace scope.
    pub fn rules(&self, store: &Store) -> Vec<ScopedRule> {
        let mut out = basic_user_rules();
        match &self.source {
            RightsSource::Static { namespace, rules } => {
                out.extend(
                    rules
                        .iter()
                        .map(|r| ScopedRule::plain(namespace.clone(), r.clone())),
                );
            }
            RightsSource::Rbac => {
                out.extend(self.cluster_role_binding_rules(store));
                out.extend(self.role_binding_rules(store));
            }
        }
        out
    }

    /// The rules of the cluster roles bound to this identity by ClusterRoleBindings.
    fn cluster_role_binding_rules(&self, store: &Store) -> Vec<ScopedRule> {
        let mut out = Vec::new();
        if let Ok(l) = store.list(&CLUSTERROLEBINDINGS, None, &ListQuery::default()) {
            for b in l.items {
                let subjects = b
                    .get("subjects")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if subjects.iter().any(|s| subject_matches(self, s, "")) {
                    let name = b
                        .pointer("/roleRef/name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    out.extend(role_rules(store, "ClusterRole", "", name).into_iter().map(
                        |(rule, resource_names)| ScopedRule {
                            namespace: None,
                            rule,
                            resource_names,
                        },
                    ));
                }
            }
        }
        out
    }

    /// The rules of the roles and cluster roles bound to this identity by RoleBindings, each
    /// limited to its binding's namespace.
    fn role_binding_rules(&self, store: &Store) -> Vec<ScopedRule> {
        let mut out = Vec::new();
        if let Ok(l) = store.list(&ROLEBINDINGS, None, &ListQuery::default()) {
            for b in l.items {
                let ns = b
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let subjects = b
                    .get("subjects")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if subjects.iter().any(|s| subject_matches(self, s, ns)) {
                    let kind = b
                        .pointer("/roleRef/kind")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let name = b
                        .pointer("/roleRef/name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    out.extend(role_rules(store, kind, ns, name).into_iter().map(
                        |(rule, resource_names)| ScopedRule {
                            namespace: Some(ns.to_string()),
                            rule,
                            resource_names,
                        },
                    ));
                }
            }
        }
        out
    }

    /// Whether this identity may do `a`.
    pub fn allowed(&self, store: &Store, a: &Attributes) -> bool {
        self.rules(store).iter().any(|sr| sr.allows(a))
    }
}

/// The cluster roles a fresh cluster has (user-facing ones, simplified).
pub fn builtin_cluster_roles() -> Vec<Value> {
    let read = ["get", "list", "watch"];
    let all = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    let view = vec![
        Rule::new(
            &read,
            &[""],
            &[
                "pods",
                "pods/log",
                "pods/status",
                "configmaps",
                "events",
                "serviceaccounts",
                "services",
                "namespaces",
            ],
        ),
        Rule::new(&read, &["apps"], &["statefulsets", "statefulsets/status"]),
        Rule::new(&read, &["batch"], &["jobs", "jobs/status"]),
    ];
    let edit = vec![
        Rule::new(
            &all,
            &[""],
            &[
                "pods",
                "pods/log",
                "pods/status",
                "configmaps",
                "events",
                "serviceaccounts",
                "services",
                "secrets",
            ],
        ),
        Rule::new(&all, &["apps"], &["statefulsets", "statefulsets/status"]),
        Rule::new(&all, &["batch"], &["jobs", "jobs/status"]),
        Rule::new(&read, &[""], &["namespaces"]),
    ];
    let mut admin = edit.clone();
    admin.push(Rule::new(
        &all,
        &["rbac.authorization.k8s.io"],
        &["roles", "rolebindings"],
    ));
    let role = |name: &str, rules: Vec<Rule>| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": rules.iter().map(Rule::to_json).collect::<Vec<_>>(),
        })
    };
    vec![
        role("cluster-admin", vec![Rule::all()]),
        role("admin", admin),
        role("edit", edit),
        role("view", view),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, res: &str, sub: &str, ns: Option<&str>) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: res.into(),
            subresource: sub.into(),
            namespace: ns.map(String::from),
            name: None,
        }
    }

    #[test]
    fn rule_matching() {
        let r = Rule::new(&["get", "list"], &[""], &["pods", "pods/status"]);
        assert!(r.allows(&attrs("list", "", "pods", "", Some("a"))));
        assert!(r.allows(&attrs("get", "", "pods", "status", Some("a"))));
        assert!(!r.allows(&attrs("watch", "", "pods", "", Some("a"))));
        assert!(!r.allows(&attrs("get", "", "pods", "log", Some("a"))));
        assert!(!r.allows(&attrs("get", "batch", "pods", "", Some("a"))));
        assert!(Rule::new(&["*"], &["*"], &["*/status"])
            .allows(&attrs("patch", "batch", "jobs", "status", None)));
        assert!(Rule::all().allows(&attrs("delete", "apps", "statefulsets", "", None)));
    }

    #[test]
    fn forbidden_wording() {
        let a = attrs("list", "", "pods", "", Some("ns"));
        assert_eq!(
            a.forbidden_message("system:serviceaccount:ns:sa"),
            "pods is forbidden: User \"system:serviceaccount:ns:sa\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
    }
}
