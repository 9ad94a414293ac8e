//! Placeholder until the patch branch lands: same signatures, merge patch only.
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum PatchError {
    BadRequest(String),
    Conflict {
        message: String,
        causes: Vec<(String, String)>,
    },
    Invalid(String),
}

#[derive(Debug, Clone, Default)]
pub struct ListSchema;
impl ListSchema {
    pub fn builtin(_group: &str, _kind: &str) -> ListSchema {
        ListSchema
    }
    pub fn from_openapi_v3(_schema: &Value) -> ListSchema {
        ListSchema
    }
}

pub fn merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    json_patch::merge(target, patch);
    Ok(())
}
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    json_patch::patch(target, &p).map_err(|e| PatchError::Invalid(e.to_string()))
}
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    _s: &ListSchema,
) -> Result<(), PatchError> {
    merge_patch(target, patch)
}
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    _manager: &str,
    _force: bool,
    _subresource: Option<&str>,
    _schema: &ListSchema,
    _now: &str,
) -> Result<Value, PatchError> {
    let mut v = live.cloned().unwrap_or(Value::Null);
    merge_patch(&mut v, applied)?;
    Ok(v)
}
pub fn record_update(
    _old: Option<&Value>,
    _new: &mut Value,
    _manager: &str,
    _operation: &str,
    _subresource: Option<&str>,
    _schema: &ListSchema,
    _now: &str,
) {
}
