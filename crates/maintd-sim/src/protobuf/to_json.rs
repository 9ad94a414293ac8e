//! A protobuf message, read by its schema, as the JSON the API server would
//! hold for it: JSON names, Go's inline embedding, and the apimachinery
//! types whose JSON form is not their message (Time, Quantity, IntOrString,
//! raw JSON), int64 as JSON numbers and bytes as base64.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::schema::{Card, Field, Scalar, Schema, Type};
use super::wire::{Fields, WireValue, read_varint};

const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";

/// Deeper than any real object (a pod is about 8 levels); a body nested
/// deeper is refused instead of recursing without bound.
const MAX_DEPTH: usize = 64;

/// Message `name` in `bytes` as a JSON value. An error names the field
/// path where the body stops making sense.
pub fn message(schema: &Schema, name: &str, bytes: &[u8]) -> Result<Value, String> {
    value_of_message(schema, name, bytes, 0)
}

fn value_of_message(
    schema: &Schema,
    name: &str,
    bytes: &[u8],
    depth: usize,
) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("objects nested more than {MAX_DEPTH} deep"));
    }
    match name {
        TIME | MICRO_TIME => time(bytes, name == MICRO_TIME),
        QUANTITY => Ok(text_field(bytes, 1)?.map_or(json!("0"), Value::String)),
        INT_OR_STRING => int_or_string(bytes),
        RAW_EXTENSION | FIELDS_V1 => raw_json(bytes),
        _ => object(schema, name, bytes, depth).map(Value::Object),
    }
}

fn object(
    schema: &Schema,
    name: &str,
    bytes: &[u8],
    depth: usize,
) -> Result<Map<String, Value>, String> {
    let fields = schema
        .message(name)
        .ok_or_else(|| format!("no layout is known for message {name}"))?;
    let mut out = Map::new();
    for item in Fields::new(bytes) {
        let (number, wire) = item?;
        // Fields this version does not know are skipped, as the API server
        // skips them.
        let Some(field) = fields.get(&number) else {
            continue;
        };
        let in_field = |e: String| format!("{}: {e}", field.json);
        match field.card {
            Card::One if field.inline => {
                let WireValue::Bytes(b) = wire else {
                    return Err(in_field(wrong_wire(&wire)));
                };
                let Type::Message(m) = &field.ty else {
                    return Err(in_field("an inline field must be a message".into()));
                };
                for (k, v) in object(schema, m, b, depth + 1).map_err(in_field)? {
                    out.insert(k, v);
                }
            }
            Card::One => {
                let v = single(schema, &field.ty, wire, depth).map_err(in_field)?;
                // Go writes a field that is not a pointer even when it is
                // empty; the API server's JSON leaves an empty optional
                // string or time out.
                if !field.required && (v.is_null() || v.as_str() == Some("")) {
                    out.remove(&field.json);
                    continue;
                }
                match (out.get_mut(&field.json), v) {
                    // A message seen twice is merged, as protobuf merges it.
                    (Some(Value::Object(old)), Value::Object(new)) => old.extend(new),
                    (_, v) => {
                        out.insert(field.json.clone(), v);
                    }
                }
            }
            Card::List => {
                let list = out.entry(field.json.clone()).or_insert_with(|| json!([]));
                let Value::Array(list) = list else {
                    return Err(in_field("a list field is also a value".into()));
                };
                match (&field.ty, wire) {
                    // Packed numbers: one length-delimited run of varints.
                    (
                        Type::Scalar(s @ (Scalar::Int32 | Scalar::Int64 | Scalar::Bool)),
                        WireValue::Bytes(mut b),
                    ) => {
                        while !b.is_empty() {
                            let v = read_varint(&mut b).map_err(in_field)?;
                            list.push(scalar(*s, WireValue::Varint(v)).map_err(in_field)?);
                        }
                    }
                    (ty, wire) => list.push(single(schema, ty, wire, depth).map_err(in_field)?),
                }
            }
            Card::Map(key) => {
                let WireValue::Bytes(entry) = wire else {
                    return Err(in_field(wrong_wire(&wire)));
                };
                let (k, v) = map_entry(schema, key, field, entry, depth).map_err(in_field)?;
                let map = out.entry(field.json.clone()).or_insert_with(|| json!({}));
                if let Value::Object(map) = map {
                    map.insert(k, v);
                }
            }
        }
    }
    Ok(out)
}

fn single(schema: &Schema, ty: &Type, wire: WireValue<'_>, depth: usize) -> Result<Value, String> {
    match ty {
        Type::Scalar(s) => scalar(*s, wire),
        Type::Message(m) => match wire {
            WireValue::Bytes(b) => value_of_message(schema, m, b, depth + 1),
            other => Err(wrong_wire(&other)),
        },
    }
}

fn scalar(s: Scalar, wire: WireValue<'_>) -> Result<Value, String> {
    // Protobuf's int32 is a varint of which the low 32 bits count.
    Ok(match (s, wire) {
        (Scalar::Int32, WireValue::Varint(v)) => json!(v as i32),
        (Scalar::Int64, WireValue::Varint(v)) => json!(v as i64),
        (Scalar::Bool, WireValue::Varint(v)) => json!(v != 0),
        (Scalar::Double, WireValue::Fixed64(v)) => {
            json!(
                serde_json::Number::from_f64(f64::from_bits(v))
                    .ok_or("a number that is not finite")?
            )
        }
        (Scalar::String, WireValue::Bytes(b)) => {
            json!(std::str::from_utf8(b).map_err(|_| "a string that is not UTF-8")?)
        }
        // Go's encoding/json writes []byte as standard base64.
        (Scalar::Bytes, WireValue::Bytes(b)) => {
            json!(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (_, other) => return Err(wrong_wire(&other)),
    })
}

fn map_entry(
    schema: &Schema,
    key: Scalar,
    field: &Field,
    entry: &[u8],
    depth: usize,
) -> Result<(String, Value), String> {
    let (mut k, mut v) = (None, None);
    for item in Fields::new(entry) {
        match item? {
            (1, wire) => k = Some(scalar(key, wire)?),
            (2, wire) => v = Some(single(schema, &field.ty, wire, depth)?),
            _ => {}
        }
    }
    let k = match k {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    // An entry without a value holds the type's zero value.
    let v = match (v, &field.ty) {
        (Some(v), _) => v,
        (None, Type::Scalar(Scalar::String | Scalar::Bytes)) => json!(""),
        (None, Type::Scalar(Scalar::Bool)) => json!(false),
        (None, Type::Scalar(_)) => json!(0),
        (None, Type::Message(m)) => value_of_message(schema, m, &[], depth + 1)?,
    };
    Ok((k, v))
}

fn wrong_wire(wire: &WireValue<'_>) -> String {
    format!(
        "a {} value where the schema expects another type",
        wire.wire_name()
    )
}

/// Field `number` of a message as a string, if it is there.
fn text_field(bytes: &[u8], number: u32) -> Result<Option<String>, String> {
    let mut out = None;
    for item in Fields::new(bytes) {
        if let (n, wire) = item?
            && n == number
        {
            out = Some(
                scalar(Scalar::String, wire)?
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    Ok(out)
}

/// `Time` is RFC 3339 in seconds, `MicroTime` in microseconds; the zero
/// time (an empty message) is null.
fn time(bytes: &[u8], micro: bool) -> Result<Value, String> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    for item in Fields::new(bytes) {
        match item? {
            (1, WireValue::Varint(v)) => seconds = v as i64,
            (2, WireValue::Varint(v)) => nanos = v as i32,
            (1 | 2, other) => return Err(wrong_wire(&other)),
            _ => {}
        }
    }
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(format!("a time with {nanos} nanoseconds"));
    }
    let t =
        jiff::Timestamp::from_second(seconds).map_err(|e| format!("a time out of range: {e}"))?;
    let t = t.strftime("%Y-%m-%dT%H:%M:%S");
    Ok(if micro {
        json!(format!("{t}.{:06}Z", nanos / 1000))
    } else {
        json!(format!("{t}Z"))
    })
}

fn int_or_string(bytes: &[u8]) -> Result<Value, String> {
    let (mut is_string, mut int, mut string) = (false, 0i32, String::new());
    for item in Fields::new(bytes) {
        match item? {
            (1, wire) => is_string = scalar(Scalar::Int64, wire)? == json!(1),
            (2, wire) => int = scalar(Scalar::Int32, wire)?.as_i64().unwrap_or_default() as i32,
            (3, wire) => {
                string = scalar(Scalar::String, wire)?
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }
            _ => {}
        }
    }
    Ok(if is_string { json!(string) } else { json!(int) })
}

/// `RawExtension` and `FieldsV1` carry JSON in their bytes.
fn raw_json(bytes: &[u8]) -> Result<Value, String> {
    let mut raw: &[u8] = &[];
    for item in Fields::new(bytes) {
        match item? {
            (1, WireValue::Bytes(b)) => raw = b,
            (1, other) => return Err(wrong_wire(&other)),
            _ => {}
        }
    }
    if raw.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(raw).map_err(|e| format!("embedded JSON that does not parse: {e}"))
}
