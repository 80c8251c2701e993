//! A custom resource's table columns: Name, then the version's `additionalPrinterColumns`
//! (or Age when it has none), each cell from its JSONPath (the subset kubectl's printer
//! columns use: `.a.b`, `['a.b']`, `[N]`, `[N:M]`, `[*]`, `[?(@.f=="v")]`).

use crate::api::custom::Column;
use serde_json::{json, Value};

/// The columns of a CRD version.
pub(super) fn from_version(version: &Value) -> Vec<Column> {
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or("").to_string();
    let mut cols = vec![Column {
        name: "Name".into(),
        ty: "string".into(),
        format: "name".into(),
        description: "Name must be unique within a namespace.".into(),
        priority: 0,
        json_path: ".metadata.name".into(),
    }];
    let given = version["additionalPrinterColumns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if given.is_empty() {
        cols.push(Column {
            name: "Age".into(),
            ty: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        });
    }
    for c in given {
        cols.push(Column {
            name: text(&c, "name"),
            ty: text(&c, "type"),
            format: text(&c, "format"),
            description: text(&c, "description"),
            priority: c["priority"].as_i64().unwrap_or(0),
            json_path: text(&c, "jsonPath"),
        });
    }
    cols
}

/// The Table's `columnDefinitions`.
pub fn column_definitions(cols: &[Column]) -> Vec<Value> {
    cols.iter()
        .map(|c| json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority}))
        .collect()
}

/// One row's cells: a missing value is null (an empty cell), a date an age (`age` of the
/// seconds since).
pub fn cells(cols: &[Column], obj: &Value, now: i64, age: fn(i64) -> String) -> Vec<Value> {
    cols.iter()
        .map(|c| {
            let found = eval(&c.json_path, obj);
            let v = match found.as_slice() {
                [] => return Value::Null,
                [one] => (*one).clone(),
                many => json!(many
                    .iter()
                    .map(|v| v
                        .as_str()
                        .map(String::from)
                        .unwrap_or_else(|| v.to_string()))
                    .collect::<Vec<_>>()
                    .join(",")),
            };
            if c.ty == "date" {
                let t = v
                    .as_str()
                    .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok());
                return match t {
                    Some(t) => json!(age(now - t.as_second())),
                    None => Value::Null,
                };
            }
            v
        })
        .collect()
}

/// The values `path` selects in `root` (none when it does not parse).
pub fn eval<'a>(path: &str, root: &'a Value) -> Vec<&'a Value> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut cur = vec![root];
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let end = p[i + 1..].find(['.', '[']).map_or(p.len(), |e| i + 1 + e);
                let key = &p[i + 1..end];
                if !key.is_empty() {
                    cur = cur.into_iter().filter_map(|v| v.get(key)).collect();
                }
                i = end;
            }
            b'[' => {
                let Some(close) = bracket_end(p, i) else {
                    return Vec::new();
                };
                cur = step(&p[i + 1..close], cur);
                i = close + 1;
            }
            _ => return Vec::new(),
        }
    }
    cur
}

/// Where the bracket opened at `open` closes (quotes and parentheses inside skipped).
fn bracket_end(p: &str, open: usize) -> Option<usize> {
    let mut quote = None;
    for (j, c) in p[open + 1..].char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ']') => return Some(open + 1 + j),
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix(['\'', '"'])
        .and_then(|x| x.strip_suffix(['\'', '"']))
        .unwrap_or(s)
}

/// One bracket step: a quoted key, an index, a slice, `*`, or a filter.
fn step<'a>(inner: &str, cur: Vec<&'a Value>) -> Vec<&'a Value> {
    let inner = inner.trim();
    if let Some(f) = inner.strip_prefix('?') {
        let f = f.trim().trim_start_matches('(').trim_end_matches(')');
        return cur
            .into_iter()
            .flat_map(|v| v.as_array().into_iter().flatten())
            .filter(|x| filter(f, x))
            .collect();
    }
    if inner == "*" {
        return cur
            .into_iter()
            .flat_map(|v| match v {
                Value::Array(a) => a.iter().collect::<Vec<_>>(),
                Value::Object(m) => m.values().collect(),
                _ => Vec::new(),
            })
            .collect();
    }
    if inner.starts_with(['\'', '"']) {
        let key = unquote(inner);
        return cur.into_iter().filter_map(|v| v.get(key)).collect();
    }
    let index = |a: &[Value], s: &str, default: i64| -> usize {
        let n = a.len() as i64;
        let k = s.trim().parse::<i64>().unwrap_or(default);
        (if k < 0 { n + k } else { k }).clamp(0, n) as usize
    };
    cur.into_iter()
        .filter_map(Value::as_array)
        .flat_map(|a| match inner.split_once(':') {
            Some((from, to)) => {
                let (f, t) = (index(a, from, 0), index(a, to, a.len() as i64));
                a.get(f..t.max(f)).unwrap_or(&[]).iter().collect::<Vec<_>>()
            }
            None => {
                let n = a.len() as i64;
                match inner.parse::<i64>() {
                    Ok(k) if k < n && k >= -n => vec![&a[(if k < 0 { n + k } else { k }) as usize]],
                    _ => Vec::new(),
                }
            }
        })
        .collect()
}

/// A filter `@.field==value` (or `!=`, or `@.field` alone: the field exists).
fn filter(f: &str, item: &Value) -> bool {
    let (lhs, op, rhs) = if let Some((l, r)) = f.split_once("==") {
        (l, "==", Some(r))
    } else if let Some((l, r)) = f.split_once("!=") {
        (l, "!=", Some(r))
    } else {
        (f, "", None)
    };
    let Some(path) = lhs.trim().strip_prefix('@') else {
        return false;
    };
    let found = eval(path, item);
    let Some(rhs) = rhs else {
        return !found.is_empty();
    };
    let want = unquote(rhs);
    let equal = found.iter().any(|v| match v {
        Value::String(s) => s == want,
        Value::Number(n) => n.to_string() == want,
        Value::Bool(b) => b.to_string() == want,
        _ => false,
    });
    if op == "==" {
        equal
    } else {
        !equal
    }
}
