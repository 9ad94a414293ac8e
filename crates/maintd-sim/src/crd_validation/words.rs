//! The API server's words for a custom resource that does not fit its
//! schema: kube-openapi's messages (k8s.io/kube-openapi
//! pkg/validation/errors/schema.go, e.g. `%s in %s should be less than or
//! equal to %v`, with `in` always "body"), turned into field errors by
//! apiextensions-apiserver's `kubeOpenAPIResultToFieldErrors`
//! (pkg/apiserver/validation/validation.go) and printed by apimachinery's
//! `field.Error` (pkg/util/validation/field/errors.go): `<field>: Invalid
//! value: <value>: <message>`, `Required value`, `Unsupported value: ...:
//! supported values: ...`, `Too long: may not be more than N bytes`,
//! `Too many: N: must have at most M items`. Values are printed as Go
//! prints them (`%v` for numbers, `%q` for strings).

use serde_json::Value;

/// The string formats apiextensions 1.37 knows (others are dropped from
/// the schema), without their dashes (formats.go).
pub const STRING_FORMATS: [&str; 26] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "k8sshortname",
    "k8slongname",
];

/// One failure, where kube-openapi names it (`spec.drainPlan[3].podType`;
/// "" for the root of what is validated).
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub name: String,
    pub what: What,
}

/// What failed, with what its words need.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    Required,
    /// The value's JSON type (or, for a formatted field, its Go format) is
    /// not the schema's.
    Type {
        want: String,
        found: &'static str,
    },
    Enum {
        value: Value,
        allowed: Vec<Value>,
    },
    TooLong {
        max: u64,
    },
    TooShort {
        min: u64,
        value: String,
    },
    Pattern {
        pattern: String,
        value: String,
    },
    MinItems {
        min: u64,
        size: u64,
    },
    MaxItems {
        max: u64,
        size: u64,
    },
    MinProperties {
        min: u64,
        size: u64,
    },
    MaxProperties {
        max: u64,
        size: u64,
    },
    /// A numeric bound: the value and kube-openapi's whole message.
    Bound {
        value: Num,
        message: String,
    },
    /// An error kube-openapi gives as a plain error rather than on a field
    /// (a value out of its format's range).
    Plain(String),
}

impl Failure {
    /// (reason, field, message without the field) of this failure's field
    /// error; `prefix` is the path validation started from (`status` for
    /// the status subresource, none for the whole object).
    pub fn cause(&self, prefix: Option<&str>) -> (String, String, String) {
        let name = &self.name;
        // The main validator's path is nil, which prints as "<nil>".
        let root = prefix.unwrap_or("<nil>").to_string();
        let child = name.strip_prefix('.').unwrap_or(name);
        let field = match prefix {
            _ if name.is_empty() || name == "." => root.clone(),
            Some(p) => format!("{p}.{child}"),
            None => child.to_string(),
        };
        let invalid = |value: String, message: String| {
            (
                "FieldValueInvalid",
                format!("Invalid value: {value}: {message}"),
            )
        };
        let plural = |n: u64, one: &str, many: &str| if n == 1 { one } else { many }.to_string();
        let (reason, body) = match &self.what {
            What::Required => ("FieldValueRequired", "Required value".to_string()),
            What::Type { want, found } => (
                "FieldValueTypeInvalid",
                format!(
                    "Invalid value: {q}: {name} in body must be of type {want}: {q}",
                    q = go_quote(found)
                ),
            ),
            What::Enum { value, allowed } => {
                let allowed: Vec<String> = allowed
                    .iter()
                    .map(|a| go_quote(&a.as_str().map_or_else(|| go_json(a), str::to_string)))
                    .collect();
                (
                    "FieldValueNotSupported",
                    format!(
                        "Unsupported value: {}: supported values: {}",
                        go_value(value),
                        allowed.join(", ")
                    ),
                )
            }
            What::TooLong { max } => (
                "FieldValueTooLong",
                format!(
                    "Too long: may not be more than {max} {}",
                    plural(*max, "byte", "bytes")
                ),
            ),
            What::TooShort { min, value } => invalid(
                go_quote(value),
                format!("{name} in body should be at least {min} chars long"),
            ),
            What::Pattern { pattern, value } => invalid(
                go_quote(value),
                format!("{name} in body should match '{pattern}'"),
            ),
            What::MinItems { min, size } => invalid(
                size.to_string(),
                format!("{name} in body should have at least {min} items"),
            ),
            What::MinProperties { min, size } => invalid(
                size.to_string(),
                format!("{name} in body should have at least {min} properties"),
            ),
            What::MaxItems { max, size } | What::MaxProperties { max, size } => (
                "FieldValueTooMany",
                format!(
                    "Too many: {size}: must have at most {max} {}",
                    plural(*max, "item", "items")
                ),
            ),
            What::Bound { value, message } => invalid(value.to_string(), message.clone()),
            What::Plain(message) => {
                let (reason, body) = invalid(go_quote(""), message.clone());
                return (reason.into(), root, body);
            }
        };
        (reason.into(), field, body)
    }
}

impl What {
    /// Whether the API server skips a CRD's CEL rules after a failure of
    /// this kind (apiextensions-apiserver's `hasBlockingErr`: NotSupported,
    /// Required, TooLong, TooMany, TypeInvalid).
    pub fn blocks_rules(&self) -> bool {
        matches!(
            self,
            What::Required
                | What::Type { .. }
                | What::Enum { .. }
                | What::TooLong { .. }
                | What::MaxItems { .. }
                | What::MaxProperties { .. }
        )
    }
}

/// The cause the API server adds when a failure kept it from running a
/// CRD's CEL rules (registry/customresource/strategy.go `hasBlockingErr`).
pub fn rules_not_checked() -> (String, String, String) {
    (
        "FieldValueInvalid".into(),
        "<nil>".into(),
        "Invalid value: null: some validation rules were not checked because the object was \
         invalid; correct the existing errors to complete validation"
            .into(),
    )
}

/// A JSON number as the API server decodes one into an unstructured
/// object: an int64 when it is one, else a float64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn of(v: &Value) -> Option<Num> {
        v.as_i64()
            .map(Num::Int)
            .or_else(|| v.as_f64().map(Num::Float))
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// Whether the value reads as a `t` of `format`, as kube-openapi's
    /// `IsValueValidAgainstRange` checks it from its decimal form.
    pub fn fits(self, t: &str, format: &str) -> bool {
        const I64: std::ops::Range<f64> = -9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0;
        let i32_range = f64::from(i32::MIN)..=f64::from(i32::MAX);
        match (t, self) {
            ("integer", Num::Int(i)) => format != "int32" || i32::try_from(i).is_ok(),
            ("integer", Num::Float(f)) => {
                f.fract() == 0.0
                    && if format == "int32" {
                        i32_range.contains(&f)
                    } else {
                        I64.contains(&f)
                    }
            }
            ("number", n) if format == "float" => (n.as_f64() as f32).is_finite(),
            _ => true,
        }
    }

    /// Whether the value passes `maximum` (an integer against the bound
    /// truncated to an integer, as Go compares them).
    pub fn above(self, max: f64, exclusive: bool) -> bool {
        match self {
            Num::Int(i) => {
                let max = max as i64;
                if exclusive { i >= max } else { i > max }
            }
            Num::Float(f) => {
                if exclusive {
                    f >= max
                } else {
                    f > max
                }
            }
        }
    }

    pub fn below(self, min: f64, exclusive: bool) -> bool {
        match self {
            Num::Int(i) => {
                let min = min as i64;
                if exclusive { i <= min } else { i < min }
            }
            Num::Float(f) => {
                if exclusive {
                    f <= min
                } else {
                    f < min
                }
            }
        }
    }

    /// A bound as the message prints it for this value: an integer for an
    /// integer value, a float64 otherwise.
    pub fn bound(self, b: f64) -> String {
        match self {
            Num::Int(_) => (b as i64).to_string(),
            Num::Float(_) => go_float(b),
        }
    }

    /// The failure of `multipleOf`, if it fails.
    pub fn multiple_of(self, factor: f64, name: &str) -> Option<What> {
        let positive = |factor: Num| What::Bound {
            value: factor,
            message: format!("factor MultipleOf declared for {name} must be positive: {factor}"),
        };
        let not = |factor: String| What::Bound {
            value: self,
            message: format!("{name} in body should be a multiple of {factor}"),
        };
        match self {
            Num::Int(i) if factor.fract() == 0.0 => {
                let factor = factor as i64;
                if factor <= 0 {
                    return Some(positive(Num::Int(factor)));
                }
                (i % factor != 0).then(|| not(factor.to_string()))
            }
            _ => {
                if factor <= 0.0 {
                    return Some(positive(Num::Float(factor)));
                }
                let x = self.as_f64();
                let times = if factor < 1.0 {
                    1.0 / factor * x
                } else {
                    x / factor
                };
                (!is_json_integer(times)).then(|| not(go_float(factor)))
            }
        }
    }
}

/// Go's `%v`.
impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(x) => f.write_str(&go_float(*x)),
        }
    }
}

/// A value's JSON type, as kube-openapi names it.
pub fn json_type(v: &Value) -> &'static str {
    match (v, Num::of(v)) {
        (Value::Null, _) => "null",
        (Value::Bool(_), _) => "boolean",
        (Value::String(_), _) => "string",
        (_, Some(Num::Int(_))) => "integer",
        (Value::Number(_), _) => "number",
        (Value::Array(_), _) => "array",
        (Value::Object(_), _) => "object",
    }
}

/// go-openapi's `IsFloat64AJSONInteger`: integral within 2^53, or within a
/// relative 1e-9 of it.
pub fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_992.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    let g = f.trunc();
    f == g || (f > 0.0 && (f - g).abs() / (f.abs() + g.abs()) < 1e-9)
}

/// Whether `v` is the enum value `allowed`, as kube-openapi compares them
/// (the value converted to the enum value's Go type first: a number to an
/// integer enum value is truncated). null is never one.
pub fn enum_matches(v: &Value, allowed: &Value) -> bool {
    match (Num::of(v), Num::of(allowed)) {
        (Some(n), Some(Num::Int(a))) => match n {
            Num::Int(i) => i == a,
            Num::Float(f) => f as i64 == a,
        },
        (Some(n), Some(Num::Float(a))) => n.as_f64() == a,
        _ => !v.is_null() && v == allowed,
    }
}

/// A bad value as `field.Error` prints it: `%v` for numbers and booleans,
/// `%q` for strings, JSON for the rest.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        _ => go_json(v),
    }
}

/// JSON as Go's encoder writes it (numbers as the API server decoded them).
fn go_json(v: &Value) -> String {
    match Num::of(v) {
        Some(n) => n.to_string(),
        None => v.to_string(),
    }
}

/// A float64 as Go's `%v` prints it: the shortest digits that read back
/// the same, in exponent form (`1e+06`) when the exponent is below -4 or
/// 6 and over.
pub fn go_float(f: f64) -> String {
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let point = exp + 1;
    if point <= 0 {
        return format!(
            "{sign}0.{}{digits}",
            "0".repeat(point.unsigned_abs() as usize)
        );
    }
    let point = point as usize;
    if digits.len() <= point {
        format!("{sign}{digits}{}", "0".repeat(point - digits.len()))
    } else {
        format!("{sign}{}.{}", &digits[..point], &digits[point..])
    }
}

/// A string as Go's `%q` (strconv.Quote) prints it.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() || matches!(c, '\u{ad}' | '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
