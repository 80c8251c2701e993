//! Reading the MPIJob's fields from its JSON value, each error naming the field's path
//! (`spec.runPolicy.backoffLimit`).

use serde_json::{Map, Value};

use super::error::MpiJobError;

/// An object of the document and where it is.
#[derive(Clone)]
pub(super) struct Obj<'a> {
    pub path: String,
    pub map: &'a Map<String, Value>,
}

/// `path.key`.
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A short JSON text of a value, for messages.
pub(super) fn show(v: &Value) -> String {
    let t = v.to_string();
    if t.chars().count() > 80 {
        format!("{}...", t.chars().take(77).collect::<String>())
    } else {
        t
    }
}

impl<'a> Obj<'a> {
    /// `v` as an object at `path`.
    pub fn new(v: &'a Value, path: &str) -> Result<Obj<'a>, MpiJobError> {
        match v {
            Value::Object(map) => Ok(Obj {
                path: path.to_string(),
                map,
            }),
            other => Err(MpiJobError::field(
                if path.is_empty() {
                    "the document"
                } else {
                    path
                },
                format!("is {}, not an object", show(other)),
                "give it as a YAML mapping",
            )),
        }
    }

    /// Refuses fields other than `known` (an unknown field would be dropped, and with it what
    /// it means).
    pub fn only(&self, known: &[&str]) -> Result<(), MpiJobError> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(MpiJobError::field(
                join(&self.path, k),
                format!(
                    "is not a field of a kubeflow.org/v2beta1 MPIJob here (known: {})",
                    known.join(", ")
                ),
                "remove it or correct its name; a field of another MPIJob version or operator cannot be honoured",
            )),
        }
    }

    /// A field's value; `null` counts as absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, want: &str) -> MpiJobError {
        let v = self.map.get(key).map(show).unwrap_or_default();
        MpiJobError::field(
            join(&self.path, key),
            format!("is {v}, not {want}"),
            format!("give {want}"),
        )
    }

    /// The path of a field.
    pub fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// An object field.
    pub fn obj(&self, key: &str) -> Result<Option<Obj<'a>>, MpiJobError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj {
                path: self.at(key),
                map,
            })),
            Some(_) => Err(self.wrong(key, "an object")),
        }
    }

    /// A text field.
    pub fn text(&self, key: &str) -> Result<Option<&'a str>, MpiJobError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong(key, "a string")),
        }
    }

    /// A whole number of at least `min`.
    pub fn int(&self, key: &str, min: i64) -> Result<Option<i64>, MpiJobError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if n >= min => Ok(Some(n)),
                _ => Err(self.wrong(key, &format!("a whole number of at least {min}"))),
            },
        }
    }

    /// true or false.
    pub fn flag(&self, key: &str) -> Result<Option<bool>, MpiJobError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.wrong(key, "true or false")),
        }
    }

    /// One of `words`.
    pub(crate) fn choice(
        &self,
        key: &str,
        words: &[&'static str],
    ) -> Result<Option<&'static str>, MpiJobError> {
        match self.text(key)? {
            None => Ok(None),
            Some(s) => words
                .iter()
                .find(|w| **w == s)
                .copied()
                .map(Some)
                .ok_or_else(|| {
                    MpiJobError::field(
                        join(&self.path, key),
                        format!("{s:?} is not one of {}", words.join(", ")),
                        format!("give one of {}", words.join(", ")),
                    )
                }),
        }
    }

    /// A map of strings (labels, annotations).
    pub fn strings(&self, key: &str) -> Result<Map<String, Value>, MpiJobError> {
        match self.get(key) {
            None => Ok(Map::new()),
            Some(Value::Object(m)) => {
                if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(MpiJobError::field(
                        format!("{}[{k}]", join(&self.path, key)),
                        "is not a string",
                        "quote the value",
                    ));
                }
                Ok(m.clone())
            }
            Some(_) => Err(self.wrong(key, "a map of strings")),
        }
    }

    /// An array field.
    pub fn list(&self, key: &str) -> Result<&'a [Value], MpiJobError> {
        match self.get(key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(self.wrong(key, "a list")),
        }
    }
}
