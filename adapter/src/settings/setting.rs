//! One setting of the registry: its names, default and help ([`Setting`]), the values it takes
//! ([`Kind`]), the checks of a value ([`Setting::parse`] and its typed wrappers) and their
//! errors ([`SettingError`]).

use std::time::Duration;

/// What values a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any text.
    Text,
    /// A file or directory.
    Path,
    /// true/false (an MCA boolean; on the command line a flag without value).
    Bool,
    /// A whole number in a range.
    Int { min: i64, max: i64 },
    /// A positive number of seconds (fractions allowed on the command line), at most a year.
    Seconds,
    /// A TCP port, 1-65535.
    Port,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// One of these words, or a whole number from 1 to `max`.
    ChoiceOrCount {
        words: &'static [&'static str],
        max: u32,
    },
}

/// The longest duration accepted: a year.
pub(crate) const MAX_SECONDS: f64 = 86_400.0 * 365.0;

impl Kind {
    /// What the kind accepts, for messages.
    pub fn accepted(&self) -> String {
        match self {
            Kind::Text => "any text".into(),
            Kind::Path => "a path".into(),
            Kind::Bool => "true or false (also 1/0, yes/no)".into(),
            Kind::Int { min, max } => format!("a whole number from {min} to {max}"),
            Kind::Seconds => "a positive number of seconds (at most a year)".into(),
            Kind::Port => "a TCP port (1-65535)".into(),
            Kind::Choice(words) => format!("one of {}", words.join(", ")),
            Kind::ChoiceOrCount { words, max } => {
                format!(
                    "one of {}, or a whole number from 1 to {max}",
                    words.join(", ")
                )
            }
        }
    }
}

/// An MCA parameter: `<framework>_k8s_<name>`, also read from `PRTE_MCA_<framework>_k8s_<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mca {
    /// `ras` or `plm`.
    pub framework: &'static str,
    /// The name within the component (what PMIx registers): `timeout`.
    pub name: &'static str,
    /// The full name: `ras_k8s_timeout`.
    pub full: &'static str,
    /// Its environment variable: `PRTE_MCA_ras_k8s_timeout`.
    pub env: &'static str,
}

/// One setting (see the module docs). Empty strings mean "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The MCA parameter, for settings PRRTE's components read.
    pub mca: Option<Mca>,
    /// Environment variables read besides the MCA parameter's, the one our programs document
    /// first.
    pub env: &'static [&'static str],
    /// The long command-line flag (without `--`).
    pub flag: &'static str,
    /// The placeholder of the flag's value in help texts.
    pub value_name: &'static str,
    /// The default as the value would be written.
    pub default: &'static str,
    /// The default in words, where it is not a plain value (computed, or taken from elsewhere).
    pub(crate) default_doc: &'static str,
    /// What the setting does (one sentence or two, no default in it).
    pub help: &'static str,
    pub kind: Kind,
}

impl Setting {
    /// The fields every entry starts from (`..Setting::NONE`).
    pub(crate) const NONE: Setting = Setting {
        mca: None,
        env: &[],
        flag: "",
        value_name: "",
        default: "",
        default_doc: "",
        help: "",
        kind: Kind::Text,
    };

    /// The name messages use: the MCA parameter's, else `--flag`, else the variable.
    pub fn name(&self) -> String {
        match (&self.mca, self.flag, self.env.first()) {
            (Some(m), _, _) => m.full.to_owned(),
            (None, flag, _) if !flag.is_empty() => format!("--{flag}"),
            (None, _, Some(var)) => (*var).to_owned(),
            (None, _, None) => String::new(),
        }
    }

    /// The name with the flag, for remedies: `ras_k8s_timeout (--timeout)`.
    pub fn refer(&self) -> String {
        match (&self.mca, self.flag) {
            (Some(m), flag) if !flag.is_empty() => format!("{} (--{flag})", m.full),
            _ => self.name(),
        }
    }

    /// Every environment variable of the setting: our programs' own names first, then the MCA
    /// parameter's.
    pub(crate) fn env_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.env.iter().copied().chain(self.mca.map(|m| m.env))
    }

    /// The variable our programs document for this setting (the first of `env_names`).
    pub fn var(&self) -> &'static str {
        self.env_names().next().unwrap_or("")
    }

    /// The help text with the default in words appended where clap cannot show it (no plain
    /// default value, or a documented one).
    pub fn help_with_default(&self) -> String {
        if self.default_doc.is_empty() {
            self.help.to_owned()
        } else {
            format!("{} [default: {}]", self.help, self.default_doc)
        }
    }

    /// The default as a number, at compile time (for the typed constants derived from it).
    pub(crate) const fn default_u64(&self) -> u64 {
        let b = self.default.as_bytes();
        assert!(!b.is_empty(), "setting has no numeric default");
        let mut n: u64 = 0;
        let mut i = 0;
        while i < b.len() {
            assert!(b[i].is_ascii_digit(), "setting's default is not a number");
            n = n * 10 + (b[i] - b'0') as u64;
            i += 1;
        }
        n
    }

    /// The value from the environment: the first of `env_names` that is set (and not
    /// empty). Two of them set to different values is an error: they are one setting.
    pub fn lookup(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<(&'static str, String)>, SettingError> {
        let mut found: Option<(&'static str, String)> = None;
        for var in self.env_names() {
            let Some(value) = env(var).filter(|v| !v.trim().is_empty()) else {
                continue;
            };
            match &found {
                None => found = Some((var, value)),
                Some((first, seen)) if seen.trim() != value.trim() => {
                    return Err(SettingError::Disagree {
                        setting: self.name(),
                        first: (*first).to_owned(),
                        first_value: seen.clone(),
                        second: var.to_owned(),
                        second_value: value,
                    })
                }
                Some(_) => {}
            }
        }
        Ok(found)
    }

    /// Ways to set it, for messages: `--prtemca NAME VALUE`, the variables, the flag.
    pub fn how_to_set(&self) -> String {
        let value = if self.value_name.is_empty() {
            "VALUE"
        } else {
            self.value_name
        };
        let mut ways = Vec::new();
        if let Some(m) = &self.mca {
            ways.push(format!("--prtemca {} {value}", m.full));
        }
        ways.extend(self.env_names().map(|v| format!("{v}={value}")));
        if !self.flag.is_empty() {
            ways.push(format!("--{} {value}", self.flag));
        }
        ways.join(", ")
    }

    /// The error for a bad value of this setting.
    pub fn invalid(&self, value: impl std::fmt::Display) -> SettingError {
        SettingError::Invalid {
            setting: self.name(),
            value: value.to_string(),
            accepted: self.kind.accepted(),
            how: self.how_to_set(),
        }
    }

    /// Checks `text` against the setting's kind; returns it trimmed.
    pub fn parse(&self, text: &str) -> Result<Value, SettingError> {
        let t = text.trim();
        let bad = || self.invalid(format!("{text:?}"));
        Ok(match self.kind {
            Kind::Text | Kind::Path => Value::Text(t.to_owned()),
            Kind::Bool => match t.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Value::Bool(true),
                "0" | "false" | "no" | "off" => Value::Bool(false),
                _ => return Err(bad()),
            },
            Kind::Int { min, max } => match t.parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) => Value::Int(n),
                _ => return Err(bad()),
            },
            Kind::Seconds => Value::Seconds(parse_seconds(t).ok_or_else(bad)?),
            Kind::Port => match t.parse::<u16>() {
                Ok(p) if p > 0 => Value::Port(p),
                _ => return Err(bad()),
            },
            Kind::Choice(words) => match words.iter().find(|w| w.eq_ignore_ascii_case(t)) {
                Some(w) => Value::Text((*w).to_owned()),
                None => return Err(bad()),
            },
            Kind::ChoiceOrCount { words, max } => {
                match words.iter().find(|w| w.eq_ignore_ascii_case(t)) {
                    Some(w) => Value::Text((*w).to_owned()),
                    None if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
                        match t.parse::<u32>() {
                            Ok(n) if (1..=max).contains(&n) => Value::Int(i64::from(n)),
                            _ => return Err(bad()),
                        }
                    }
                    None => return Err(bad()),
                }
            }
        })
    }

    /// A number of seconds (an MCA integer, or a command-line value) as a duration.
    pub fn seconds(&self, text: &str) -> Result<Duration, SettingError> {
        match self.parse(text)? {
            Value::Seconds(d) => Ok(d),
            _ => Err(self.invalid(text)),
        }
    }

    /// Checks a duration against the rule of [`Kind::Seconds`] (positive, at most a year).
    pub(crate) fn check_duration(&self, d: Duration) -> Result<Duration, SettingError> {
        if d.is_zero() || d.as_secs_f64() > MAX_SECONDS {
            return Err(self.invalid(format!("\"{}\"", d.as_secs_f64())));
        }
        Ok(d)
    }

    /// A TCP port.
    pub fn port(&self, text: &str) -> Result<u16, SettingError> {
        match self.parse(text)? {
            Value::Port(p) => Ok(p),
            _ => Err(self.invalid(text)),
        }
    }

    /// A whole number in the setting's range.
    pub fn int(&self, text: &str) -> Result<i64, SettingError> {
        match self.parse(text)? {
            Value::Int(n) => Ok(n),
            _ => Err(self.invalid(text)),
        }
    }

    /// The value as PMIx's int storage holds it (MCA integers, ports, whole seconds).
    pub fn mca_int(&self, text: &str) -> Result<i32, SettingError> {
        let n = match self.parse(text)? {
            Value::Int(n) => n,
            Value::Port(p) => i64::from(p),
            Value::Seconds(d) if d.subsec_nanos() == 0 => d.as_secs() as i64,
            _ => return Err(self.invalid(format!("{text:?}"))),
        };
        i32::try_from(n).map_err(|_| self.invalid(format!("{text:?}")))
    }

    /// A boolean.
    pub fn mca_bool(&self, text: &str) -> Result<bool, SettingError> {
        match self.parse(text)? {
            Value::Bool(b) => Ok(b),
            _ => Err(self.invalid(format!("{text:?}"))),
        }
    }

    /// The typed value from the environment ([`Self::lookup`]), else from the default, else
    /// `None`; a bad value names the variable it came from.
    pub fn from_env<T>(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        typed: impl Fn(&Setting, &str) -> Result<T, SettingError>,
    ) -> Result<Option<T>, SettingError> {
        match self.lookup(env)? {
            Some((var, value)) => typed(self, &value).map(Some).map_err(|e| match e {
                SettingError::Invalid {
                    setting,
                    value,
                    accepted,
                    how,
                } => SettingError::Invalid {
                    setting: format!("{setting} (from ${var})"),
                    value,
                    accepted,
                    how,
                },
                other => other,
            }),
            None if self.default.is_empty() => Ok(None),
            None => typed(self, self.default).map(Some),
        }
    }
}

/// A checked value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Text(String),
    Bool(bool),
    Int(i64),
    Seconds(Duration),
    Port(u16),
}

/// A positive, finite number of seconds of at most a year.
pub(crate) fn parse_seconds(text: &str) -> Option<Duration> {
    let secs: f64 = text.trim().parse().ok()?;
    (secs.is_finite() && secs > 0.0 && secs <= MAX_SECONDS).then(|| Duration::from_secs_f64(secs))
}

/// A bad setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("{setting} = {value} is not valid: it takes {accepted}; set it with {how}")]
    Invalid {
        setting: String,
        value: String,
        accepted: String,
        how: String,
    },
    #[error("{first}={first_value:?} and {second}={second_value:?} disagree: both name {setting}, one setting read by the launcher and the agents alike; set only one of them, or both to the same value")]
    Disagree {
        setting: String,
        first: String,
        first_value: String,
        second: String,
        second_value: String,
    },
}
