//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

use serde_json::Value;

use super::PatchError;

/// Applies an RFC 7386 merge patch (`application/merge-patch+json`).
///
/// Maps merge recursively, `null` deletes a key, every other value (lists
/// included) replaces. Unlike the RFC, a patch whose root is not an object is
/// rejected: the result must stay a Kubernetes object, and the API server
/// answers 400 for such a body too.
pub fn merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    if !patch.is_object() {
        return Err(PatchError::BadRequest(format!(
            "a merge patch must be a JSON object, got {}; send {{\"field\": value}}",
            kind_of(patch)
        )));
    }
    json_patch::merge(target, patch);
    Ok(())
}

/// Applies an RFC 6902 JSON patch (`application/json-patch+json`).
///
/// A body that is not a list of operations is 400. Any operation that fails
/// (a `test` that does not match, a path that does not exist, `move` into
/// itself) is 422 and leaves `target` unchanged: Kubernetes answers every
/// apply-time error of a JSON patch with 422 (`patch.go`, `applyJSPatch`).
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|err| {
        PatchError::BadRequest(format!(
            "a JSON patch must be a list of {{\"op\", \"path\", ...}} operations: {err}"
        ))
    })?;
    json_patch::patch(target, &ops).map_err(|err| PatchError::Invalid(err.to_string()))
}

/// Names a JSON value's type for error messages.
pub(super) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
