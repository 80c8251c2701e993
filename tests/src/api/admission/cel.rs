//! The CEL environment of a policy, through `cel-interpreter`: the variables `object`,
//! `oldObject` (null where the operation has none), `request`, `namespaceObject` and
//! `variables` (each of the policy's `variables`, in order, the later seeing the earlier), and
//! Kubernetes' `dyn()` besides the standard functions and macros (`has`, `all`, `exists`,
//! `exists_one`, `map`, `filter`, `in`, `size`, `int`, `string`, `startsWith`, ...). JSON maps to
//! CEL as Kubernetes maps it: objects to maps with string keys, integers to `int`, other
//! numbers to `double`. The same environment evaluates CRDs' `x-kubernetes-validations`
//! (`crate::api::crd`), with `self` and `oldSelf` for variables.

use cel_interpreter::{Context, ExecutionError, Program, Value as Cel};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// A JSON value as CEL sees it.
pub(crate) fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => Cel::from(
            m.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<HashMap<String, Cel>>(),
        ),
    }
}

/// Compiles `expression`: a parse error, or a panic of the parser (which has some on
/// malformed input, such as `a >`), as an error.
pub(crate) fn compile(expression: &str) -> Result<Program, String> {
    std::panic::catch_unwind(|| Program::compile(expression))
        .map_err(|_| format!("Syntax error: {expression:?} does not parse"))?
        .map_err(|e| e.to_string())
}

/// The functions the environment has besides the operators and macros: the ones an
/// expression calls must be among these.
pub(crate) const FUNCTIONS: &[&str] = &[
    "contains",
    "size",
    "max",
    "min",
    "startsWith",
    "endsWith",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "matches",
    "dyn",
];

/// The functions `program` calls that the environment does not have (operators, written
/// `_==_`, `!_`, `@in`, are the interpreter's own).
pub(crate) fn unknown_functions(program: &Program) -> Vec<String> {
    let mut unknown: Vec<String> = program
        .references()
        .functions()
        .into_iter()
        .filter(|f| f.starts_with(|c: char| c.is_ascii_alphabetic()) && !FUNCTIONS.contains(f))
        .map(String::from)
        .collect();
    unknown.sort();
    unknown
}

/// A policy's evaluation context.
pub(crate) struct Env {
    ctx: Context<'static>,
    variables: HashMap<String, Cel>,
}

/// Kubernetes' `dyn()`: a hint to its type checker, the value itself at run time.
fn dyn_(v: Cel) -> Result<Cel, ExecutionError> {
    Ok(v)
}

impl Env {
    /// The context of one request: `vars` are `object`, `oldObject`, `request`,
    /// `namespaceObject`.
    pub(crate) fn new(vars: &[(&str, &Value)]) -> Env {
        let mut ctx = Context::default();
        ctx.add_function("dyn", dyn_);
        for (name, v) in vars {
            ctx.add_variable_from_value(*name, to_cel(v));
        }
        ctx.add_variable_from_value("variables", Cel::from(HashMap::<String, Cel>::new()));
        Env {
            ctx,
            variables: HashMap::new(),
        }
    }

    /// Evaluates `expression`; an error (it does not compile, does not evaluate) as
    /// Kubernetes words it.
    pub(super) fn eval(&self, expression: &str) -> Result<Cel, String> {
        let failed = |e: String| format!("expression '{expression}' resulted in error: {e}");
        let program =
            compile(expression).map_err(|e| failed(format!("compilation failed: {e}")))?;
        self.run(&program).map_err(failed)
    }

    /// Runs a compiled program; the error as the interpreter words it.
    pub(crate) fn run(&self, program: &Program) -> Result<Cel, String> {
        program.execute(&self.ctx).map_err(|e| e.to_string())
    }

    /// Evaluates the policy's `variables` in order into `variables.NAME`; one that fails is
    /// left out (an expression that uses it then fails in its turn).
    pub(super) fn define(&mut self, variables: &Value) {
        for v in variables.as_array().into_iter().flatten() {
            let (Some(name), Some(e)) = (v["name"].as_str(), v["expression"].as_str()) else {
                continue;
            };
            if let Ok(value) = self.eval(e) {
                self.variables.insert(name.to_string(), value);
                self.ctx
                    .add_variable_from_value("variables", Cel::from(self.variables.clone()));
            }
        }
    }

    /// Evaluates a condition: true, false, or why not a bool.
    pub(super) fn holds(&self, expression: &str) -> Result<bool, String> {
        match self.eval(expression)? {
            Cel::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{expression}' resulted in error: no such overload: got {}, want bool",
                other.type_of()
            )),
        }
    }
}
