//! Label and field selectors as accepted in `labelSelector=` and `fieldSelector=`.

use super::resources::ResourceType;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Exists,
    NotExists,
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Open,
    Close,
    Comma,
    In,
    NotIn,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("identifier {s:?}"),
            Tok::Eq => "'='".into(),
            Tok::DoubleEq => "'=='".into(),
            Tok::NotEq => "'!='".into(),
            Tok::Bang => "'!'".into(),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::Comma => "','".into(),
            Tok::In => "'in'".into(),
            Tok::NotIn => "'notin'".into(),
        }
    }
}

fn tokenize(s: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let cs: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        match c {
            c if c.is_whitespace() => i += 1,
            ',' => {
                out.push(Tok::Comma);
                i += 1
            }
            '(' => {
                out.push(Tok::Open);
                i += 1
            }
            ')' => {
                out.push(Tok::Close);
                i += 1
            }
            '=' => {
                if cs.get(i + 1) == Some(&'=') {
                    out.push(Tok::DoubleEq);
                    i += 2
                } else {
                    out.push(Tok::Eq);
                    i += 1
                }
            }
            '!' => {
                if cs.get(i + 1) == Some(&'=') {
                    out.push(Tok::NotEq);
                    i += 2
                } else {
                    out.push(Tok::Bang);
                    i += 1
                }
            }
            _ => {
                let start = i;
                while i < cs.len() && !cs[i].is_whitespace() && !",()=!".contains(cs[i]) {
                    i += 1;
                }
                let word: String = cs[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                });
            }
        }
    }
    Ok(out)
}

fn is_name_part(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_' || *c == b'.')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Checks a label key: `[prefix/]name`, name at most 63 characters of `[A-Za-z0-9_.-]`
/// starting and ending alphanumeric, prefix a DNS subdomain.
pub fn check_label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        if !is_dns_subdomain(p) {
            return Err(format!(
                "invalid label key {k:?}: prefix part must be a lowercase DNS subdomain"
            ));
        }
    }
    if !is_name_part(name, 63) {
        return Err(format!(
            "invalid label key {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', start and end with an alphanumeric character, and be at most 63 characters"
        ));
    }
    Ok(())
}

/// Checks a label value: empty, or at most 63 characters of `[A-Za-z0-9_.-]` starting and
/// ending alphanumeric.
pub fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_name_part(v, 63) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {v:?}: a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', start and end with an alphanumeric character, and be at most 63 characters"
        ))
    }
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    fn ident(&mut self, what: &str) -> Result<String, String> {
        match self.next() {
            Some(Tok::Ident(s)) => Ok(s),
            Some(t) => Err(format!("found {}, expected: {what}", t.describe())),
            None => Err(format!("found end of input, expected: {what}")),
        }
    }
    /// A value after `=`, `==` or `!=`: may be empty (followed by ',' or end).
    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            None | Some(Tok::Comma) => Ok(String::new()),
            Some(Tok::Ident(_)) => self.ident("value"),
            Some(t) => Err(format!("found {}, expected: value", t.describe())),
        }
    }
    fn set(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Tok::Open) => {}
            Some(t) => return Err(format!("found {}, expected: '('", t.describe())),
            None => return Err("found end of input, expected: '('".into()),
        }
        let mut vals = Vec::new();
        loop {
            match self.next() {
                Some(Tok::Ident(v)) => {
                    check_label_value(&v)?;
                    vals.push(v);
                    match self.next() {
                        Some(Tok::Comma) => continue,
                        Some(Tok::Close) => break,
                        Some(t) => {
                            return Err(format!("found {}, expected: ',' or ')'", t.describe()))
                        }
                        None => return Err("found end of input, expected: ')'".into()),
                    }
                }
                Some(Tok::Close) if vals.is_empty() => {
                    return Err("for 'in' and 'notin' operators, values set can't be empty".into())
                }
                Some(t) => return Err(format!("found {}, expected: value", t.describe())),
                None => return Err("found end of input, expected: ')'".into()),
            }
        }
        Ok(vals)
    }
    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(&Tok::Bang) {
            self.next();
            let key = self.ident("label key")?;
            check_label_key(&key)?;
            return Ok(Requirement {
                key,
                op: Op::NotExists,
            });
        }
        let key = self.ident("label key")?;
        check_label_key(&key)?;
        let op = match self.peek() {
            None | Some(Tok::Comma) => Op::Exists,
            Some(Tok::Eq) | Some(Tok::DoubleEq) => {
                self.next();
                let v = self.value()?;
                check_label_value(&v)?;
                Op::Eq(v)
            }
            Some(Tok::NotEq) => {
                self.next();
                let v = self.value()?;
                check_label_value(&v)?;
                Op::NotEq(v)
            }
            Some(Tok::In) => {
                self.next();
                Op::In(self.set()?)
            }
            Some(Tok::NotIn) => {
                self.next();
                Op::NotIn(self.set()?)
            }
            Some(t) => {
                return Err(format!(
                    "found {}, expected: '=', '!=', '==', 'in', 'notin', ',' or end of input",
                    t.describe()
                ))
            }
        };
        Ok(Requirement { key, op })
    }
}

impl LabelSelector {
    /// Parses the string form (`a=b,c!=d,e in (f,g),!h`).
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let toks = tokenize(s)?;
        let mut p = Parser { toks, pos: 0 };
        let mut reqs = Vec::new();
        if p.peek().is_none() {
            return Ok(LabelSelector { reqs });
        }
        loop {
            reqs.push(
                p.requirement()
                    .map_err(|e| format!("unable to parse requirement: {e}"))?,
            );
            match p.next() {
                None => break,
                Some(Tok::Comma) => continue,
                Some(t) => {
                    return Err(format!(
                        "unable to parse requirement: found {}, expected: ','",
                        t.describe()
                    ))
                }
            }
        }
        Ok(LabelSelector { reqs })
    }

    /// A selector from a `LabelSelector` object (matchLabels + matchExpressions).
    pub fn from_object(sel: &Value) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement {
                    key: k.clone(),
                    op: Op::Eq(v.as_str().unwrap_or("").to_string()),
                });
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let vals: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str) {
                    Some("In") => Op::In(vals),
                    Some("NotIn") => Op::NotIn(vals),
                    Some("Exists") => Op::Exists,
                    Some("DoesNotExist") => Op::NotExists,
                    other => return Err(format!("unsupported label selector operator {other:?}")),
                };
                reqs.push(Requirement { key, op });
            }
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match &r.op {
            Op::Exists => get(&r.key).is_some(),
            Op::NotExists => get(&r.key).is_none(),
            Op::Eq(v) => get(&r.key) == Some(v.as_str()),
            Op::NotEq(v) => get(&r.key) != Some(v.as_str()),
            Op::In(vs) => get(&r.key).is_some_and(|x| vs.iter().any(|v| v == x)),
            Op::NotIn(vs) => !get(&r.key).is_some_and(|x| vs.iter().any(|v| v == x)),
        })
    }
}

/// A parsed field selector.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>, // field, equal?, value
}

/// The fields each resource can be selected by (besides metadata.name / metadata.namespace).
fn supported_fields(rt: &ResourceType) -> &'static [&'static str] {
    match (rt.group, rt.plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("batch", "jobs") => &["status.successful"],
        _ => &[],
    }
}

fn field_value(obj: &Value, field: &str) -> String {
    if field == "status.successful" {
        return obj
            .pointer("/status/succeeded")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .to_string();
    }
    if field == "source" {
        return obj
            .pointer("/source/component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
    }
    let ptr = format!("/{}", field.replace('.', "/"));
    match obj.pointer(&ptr) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        None if field == "spec.hostNetwork" || field == "spec.unschedulable" => "false".into(),
        _ => String::new(),
    }
}

impl FieldSelector {
    pub fn parse(rt: &ResourceType, s: &str) -> Result<FieldSelector, String> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: '{part}'; can't understand '{part}' (expected FIELD=VALUE, FIELD==VALUE or FIELD!=VALUE)"));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !supported_fields(rt).contains(&field)
            {
                return Err(format!(
                    "field label not supported: {field} (for {})",
                    rt.qualified()
                ));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(f, eq, v)| (field_value(obj, f) == *v) == *eq)
    }

    /// If the selector pins metadata.name, that name (lets a watch of one object skip others fast).
    pub fn pinned_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn label_selectors() {
        let o = obj(json!({"app": "x", "tier": "db", "batch.kubernetes.io/job-name": "j"}));
        let cases = [
            ("", true),
            ("app=x", true),
            ("app==x", true),
            ("app!=x", false),
            ("app=y", false),
            ("missing!=y", true),
            ("app in (x, y)", true),
            ("app notin (x,y)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=x,tier=db", true),
            ("app=x,tier=web", false),
            ("batch.kubernetes.io/job-name=j", true),
            ("app=x, tier in (db)", true),
        ];
        for (s, want) in cases {
            let sel = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(sel.matches(&o), want, "{s}");
        }
    }

    #[test]
    fn malformed_label_selectors() {
        for s in [
            "app=(x)",
            "app in x",
            "app in ()",
            "=x",
            "app=x,",
            "a b",
            "app in (x",
            "bad key!=1=2",
            "-bad=1",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s} should not parse");
        }
    }

    #[test]
    fn field_selectors() {
        let rt = &super::super::resources::PODS;
        let o =
            json!({"metadata": {"name": "p", "namespace": "n"}, "status": {"phase": "Running"}});
        assert!(FieldSelector::parse(rt, "status.phase=Running")
            .unwrap()
            .matches(&o));
        assert!(!FieldSelector::parse(rt, "status.phase!=Running")
            .unwrap()
            .matches(&o));
        assert!(
            FieldSelector::parse(rt, "metadata.name==p,metadata.namespace=n")
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse(rt, "spec.nodeName=")
            .unwrap()
            .matches(&o));
        assert!(FieldSelector::parse(rt, "spec.bogus=1").is_err());
        assert!(FieldSelector::parse(rt, "nonsense").is_err());
    }
}
