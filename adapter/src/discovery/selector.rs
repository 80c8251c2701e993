//! Client-side validation of Kubernetes label selectors.
//!
//! The accepted language is the one `kubectl -l` and the API server's `labelSelector` accept:
//! comma-separated requirements, each one of `key`, `!key`, `key=value`, `key==value`,
//! `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`, `key>N`, `key<N`. Keys are qualified
//! names (`[prefix/]name`), values are label values. Validating here turns a typo into a precise
//! message instead of an opaque 400 from the server. Matching pods against a selector is the API
//! server's job (discovery lists and watches with the selector), so there is no matcher here.

use super::names::{is_dns_subdomain, is_name_part};

/// What is wrong with a label selector, as a sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("the selector is empty (it would select every pod in the namespace)")]
    Empty,
    #[error("the selector ends with a ',' and no requirement after it")]
    TrailingComma,
    #[error("expected ',' or the end of the selector after a requirement, found {found}")]
    ExpectedSeparator { found: String },
    #[error("expected a label key, found {found}")]
    ExpectedKey { found: String },
    #[error("the value after {op} for key {key:?} must be an integer, found {value:?}")]
    NotAnInteger {
        op: String,
        key: String,
        value: String,
    },
    #[error(
        "expected an operator (=, ==, !=, in, notin, >, <), ',' or the end after key {key:?}, \
         found {found}"
    )]
    ExpectedOperator { key: String, found: String },
    #[error("expected a label value, found {found}")]
    ExpectedValue { found: String },
    #[error("expected '(' after {op:?} for key {key:?}, found {found}")]
    ExpectedOpen {
        op: String,
        key: String,
        found: String,
    },
    #[error("unexpected {found} in the value list of {key:?} {op}")]
    UnexpectedInList {
        found: String,
        key: String,
        op: String,
    },
    #[error("the value list of {key:?} {op} is not closed with ')'")]
    Unclosed { key: String, op: String },
    #[error("the value list of {key:?} {op} is empty; give at least one value")]
    EmptyList { key: String, op: String },
    #[error(
        "label key {key:?} has an invalid prefix {prefix:?}: it must be a lowercase DNS \
         subdomain (like example.com) of at most 253 characters"
    )]
    InvalidPrefix { key: String, prefix: String },
    #[error(
        "label key {key:?} is invalid: its name part must be 1-63 characters of letters, digits, \
         '-', '_' or '.', starting and ending with a letter or digit"
    )]
    InvalidKey { key: String },
    #[error(
        "label value {value:?} is invalid: it must be at most 63 characters of letters, digits, \
         '-', '_' or '.', starting and ending with a letter or digit"
    )]
    InvalidValue { value: String },
    /// The API server refused the selector (400) though it passed these checks.
    #[error("the API server rejected it: {message}")]
    Rejected { message: String },
}

/// One parsed requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Exists(String),
    DoesNotExist(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A validated label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub(crate) requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("{s:?}"),
            Token::Bang => "'!'".into(),
            Token::Eq => "'='".into(),
            Token::DoubleEq => "'=='".into(),
            Token::NotEq => "'!='".into(),
            Token::Gt => "'>'".into(),
            Token::Lt => "'<'".into(),
            Token::Comma => "','".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | ',' | '(' | ')' | '<' | '>')
}

fn lex(input: &str) -> Vec<Token> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (tok, len) = match (c, next) {
            ('!', Some('=')) => (Token::NotEq, 2),
            ('=', Some('=')) => (Token::DoubleEq, 2),
            ('!', _) => (Token::Bang, 1),
            ('=', _) => (Token::Eq, 1),
            ('>', _) => (Token::Gt, 1),
            ('<', _) => (Token::Lt, 1),
            (',', _) => (Token::Comma, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !is_special(chars[i]) {
                    i += 1;
                }
                tokens.push(Token::Ident(chars[start..i].iter().collect()));
                continue;
            }
        };
        tokens.push(tok);
        i += len;
    }
    tokens
}

/// Parses and validates a label selector; the error is a sentence saying what is wrong.
pub(crate) fn parse_selector(input: &str) -> Result<Selector, SelectorError> {
    if input.trim().is_empty() {
        return Err(SelectorError::Empty);
    }
    let tokens = lex(input);
    let mut p = Parser { tokens, pos: 0 };
    let mut requirements = Vec::new();
    loop {
        requirements.push(p.requirement()?);
        match p.next() {
            None => break,
            Some(Token::Comma) => {
                if p.peek().is_none() {
                    return Err(SelectorError::TrailingComma);
                }
            }
            Some(t) => {
                return Err(SelectorError::ExpectedSeparator {
                    found: t.describe(),
                })
            }
        }
    }
    Ok(Selector { requirements })
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            Some(Token::Ident(k)) => {
                validate_key(&k)?;
                Ok(k)
            }
            Some(t) => Err(SelectorError::ExpectedKey {
                found: t.describe(),
            }),
            None => Err(SelectorError::ExpectedKey {
                found: "the end of the selector".into(),
            }),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Token::Bang) {
            self.pos += 1;
            let key = self.key()?;
            return Ok(Requirement::DoesNotExist(key));
        }
        let key = self.key()?;
        match self.peek().cloned() {
            None | Some(Token::Comma) => Ok(Requirement::Exists(key)),
            Some(Token::Eq) | Some(Token::DoubleEq) => {
                self.pos += 1;
                Ok(Requirement::Equals(key, self.value()?))
            }
            Some(Token::NotEq) => {
                self.pos += 1;
                Ok(Requirement::NotEquals(key, self.value()?))
            }
            Some(op @ (Token::Gt | Token::Lt)) => {
                self.pos += 1;
                let v = self.value()?;
                let n: i64 = v.parse().map_err(|_| SelectorError::NotAnInteger {
                    op: op.describe(),
                    key: key.clone(),
                    value: v.clone(),
                })?;
                Ok(if op == Token::Gt {
                    Requirement::GreaterThan(key, n)
                } else {
                    Requirement::LessThan(key, n)
                })
            }
            Some(Token::Ident(word)) if word == "in" || word == "notin" => {
                self.pos += 1;
                let values = self.value_set(&key, &word)?;
                Ok(if word == "in" {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
            Some(t) => Err(SelectorError::ExpectedOperator {
                key,
                found: t.describe(),
            }),
        }
    }

    /// A value after `=`, `==` or `!=`: possibly empty (`key=` selects an empty value).
    fn value(&mut self) -> Result<String, SelectorError> {
        match self.peek().cloned() {
            Some(Token::Ident(v)) => {
                self.pos += 1;
                validate_value(&v)?;
                Ok(v)
            }
            None | Some(Token::Comma) => Ok(String::new()),
            Some(t) => Err(SelectorError::ExpectedValue {
                found: t.describe(),
            }),
        }
    }

    fn value_set(&mut self, key: &str, op: &str) -> Result<Vec<String>, SelectorError> {
        let found = match self.next() {
            Some(Token::Open) => None,
            Some(t) => Some(t.describe()),
            None => Some("the end of the selector".to_owned()),
        };
        if let Some(found) = found {
            return Err(SelectorError::ExpectedOpen {
                op: op.into(),
                key: key.into(),
                found,
            });
        }
        let mut values = Vec::new();
        let mut expect_value = true;
        loop {
            match self.next() {
                Some(Token::Close) => {
                    if expect_value && !values.is_empty() {
                        values.push(String::new());
                    }
                    break;
                }
                Some(Token::Ident(v)) if expect_value => {
                    validate_value(&v)?;
                    values.push(v);
                    expect_value = false;
                }
                Some(Token::Comma) => {
                    if expect_value {
                        values.push(String::new());
                    }
                    expect_value = true;
                }
                Some(t) => {
                    return Err(SelectorError::UnexpectedInList {
                        found: t.describe(),
                        key: key.into(),
                        op: op.into(),
                    })
                }
                None => {
                    return Err(SelectorError::Unclosed {
                        key: key.into(),
                        op: op.into(),
                    })
                }
            }
        }
        if values.is_empty() {
            return Err(SelectorError::EmptyList {
                key: key.into(),
                op: op.into(),
            });
        }
        Ok(values)
    }
}

/// Validates a label key: `[prefix/]name`, prefix a DNS subdomain, name at most 63 characters
/// of alphanumerics, '-', '_' and '.', starting and ending alphanumeric.
pub(crate) fn validate_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix.filter(|p| !is_dns_subdomain(p)) {
        return Err(SelectorError::InvalidPrefix {
            key: key.into(),
            prefix: p.into(),
        });
    }
    if !is_name_part(name) {
        return Err(SelectorError::InvalidKey { key: key.into() });
    }
    Ok(())
}

/// Validates a label value: empty, or at most 63 characters of alphanumerics, '-', '_' and
/// '.', starting and ending alphanumeric.
pub(crate) fn validate_value(value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_name_part(value) {
        Ok(())
    } else {
        Err(SelectorError::InvalidValue {
            value: value.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_operator() {
        let s =
            parse_selector("a=1, b==2,c!=3, d in (x, y), e notin (z), f, !g, h>5, i<7").unwrap();
        assert_eq!(
            s.requirements,
            vec![
                Requirement::Equals("a".into(), "1".into()),
                Requirement::Equals("b".into(), "2".into()),
                Requirement::NotEquals("c".into(), "3".into()),
                Requirement::In("d".into(), vec!["x".into(), "y".into()]),
                Requirement::NotIn("e".into(), vec!["z".into()]),
                Requirement::Exists("f".into()),
                Requirement::DoesNotExist("g".into()),
                Requirement::GreaterThan("h".into(), 5),
                Requirement::LessThan("i".into(), 7),
            ]
        );
    }

    #[test]
    fn accepts_prefixed_keys_and_empty_values() {
        let s = parse_selector("batch.kubernetes.io/job-name=pi-job").unwrap();
        assert_eq!(
            s.requirements,
            vec![Requirement::Equals(
                "batch.kubernetes.io/job-name".into(),
                "pi-job".into()
            )]
        );
        let s = parse_selector("tier=").unwrap();
        assert_eq!(
            s.requirements,
            vec![Requirement::Equals("tier".into(), String::new())]
        );
        let s = parse_selector("tier=,app=x").unwrap();
        assert_eq!(s.requirements.len(), 2);
        parse_selector("app.kubernetes.io/name=My_App.v1").unwrap();
    }

    #[test]
    fn rejects_bad_syntax_with_reasons() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("   ", "empty"),
            ("app=", ""), // valid, sanity check below
            ("app==x==y", "expected ','"),
            ("app=x,", "ends with a ','"),
            (",app=x", "expected a label key"),
            ("app in x", "expected '('"),
            ("app in (x", "not closed"),
            ("app in ()", "empty"),
            ("app notin (a b)", "unexpected"),
            ("app>x", "must be an integer"),
            ("=x", "expected a label key"),
            ("app=x y", "expected ','"),
            ("-app=x", "is invalid"),
            ("app=-x", "is invalid"),
            ("Example.com/app=x", "invalid prefix"),
            ("/app=x", "invalid prefix"),
            ("a/b/c=x", "is invalid"),
            (
                "app=this-value-is-far-too-long-for-a-kubernetes-label-value-it-has-70ch",
                "is invalid",
            ),
            ("app)", "found ')'"),
        ];
        for (input, needle) in cases {
            if input == &"app=" {
                assert!(parse_selector(input).is_ok());
                continue;
            }
            let err = parse_selector(input).expect_err(input).to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
        }
    }
}
