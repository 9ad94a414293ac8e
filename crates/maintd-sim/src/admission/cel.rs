//! CEL as admission policies use it: expressions compiled by the `cel`
//! crate and evaluated over JSON objects.
//!
//! Like the API server's: a field that is not set is an error ("no such
//! key") unless the expression asks `has()` first; a member of `null` is
//! an error. Differences: no type checking before evaluation (an
//! expression the API server would refuse to compile may still run here),
//! numbers are `int` when whole and `double` otherwise, and the Kubernetes
//! extension libraries (quantity, url, ip, authorizer) are missing: an
//! expression calling one fails, and the policy's failurePolicy decides.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value};
use serde_json::Value as Json;

/// A compiled expression, with the source kept for messages.
pub struct Expression {
    pub source: String,
    program: Result<Program, String>,
}

impl Expression {
    pub fn compile(source: &str) -> Self {
        Expression {
            source: source.to_string(),
            program: Program::compile(source).map_err(|e| one_line(&e.to_string())),
        }
    }

    /// The names `variables.<name>` the expression reads.
    pub fn variables_used(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = self.source.as_str();
        while let Some(i) = rest.find("variables.") {
            let after = &rest[i + "variables.".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
            rest = after;
        }
        out
    }

    /// Evaluates the expression in `scope` (see [`scope`]).
    pub fn eval(&self, scope: &Context) -> Result<Value, String> {
        let program = self
            .program
            .as_ref()
            .map_err(|e| format!("compilation failed: {e}"))?;
        program.execute(scope).map_err(|e| one_line(&e.to_string()))
    }
}

/// The standard library, built once: every scope shares it.
static STDLIB: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// A scope with `bindings` as its top-level names. The values are converted
/// for CEL here, once, however many expressions run in the scope or in
/// inner scopes made from it (`Context::new_inner_scope`).
pub fn scope(bindings: &[(&str, Value)]) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(STDLIB.clone());
    for (name, value) in bindings {
        ctx.add_variable_from_value(*name, value.clone());
    }
    ctx
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A JSON value as CEL sees it.
pub fn value(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => Value::List(Arc::new(items.iter().map(value).collect())),
        Json::Object(fields) => {
            let map: HashMap<Key, Value> = fields
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), value(v)))
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A map of already converted values (the `variables` of a policy).
pub fn map(entries: &[(String, Value)]) -> Value {
    let map: HashMap<Key, Value> = entries
        .iter()
        .map(|(k, v)| (Key::String(Arc::new(k.clone())), v.clone()))
        .collect();
    Value::Map(Map { map: Arc::new(map) })
}
