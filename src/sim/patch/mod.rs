//! The four patch kinds of the Kubernetes API, on JSON objects: JSON merge
//! patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch (with the
//! directives kubectl sends), and server-side apply with field ownership
//! recorded in `metadata.managedFields`.

mod apply;
mod schema;
mod strategic;

pub use apply::{apply, record_update};
pub use schema::{ListKind, ListSchema};
pub use strategic::strategic_merge_patch;

use serde_json::Value;

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchError {
    /// 400: the patch itself is malformed.
    BadRequest(String),
    /// 409: a server-side apply conflicts with another manager's fields.
    Conflict {
        message: String,
        /// (field, message)
        causes: Vec<(String, String)>,
    },
    /// 422: the patch is well-formed but cannot apply (a failed `test`).
    Invalid(String),
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    if !patch.is_object() {
        return Err(PatchError::BadRequest(
            "a merge patch must be a JSON object".into(),
        ));
    }
    json_patch::merge(target, patch);
    Ok(())
}

/// RFC 6902 JSON patch. A malformed patch is a 400; an operation that
/// cannot apply (a failed `test`, a missing path) is a 422, as the
/// apiserver answers.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::BadRequest(format!("the JSON patch is malformed: {e}")))?;
    json_patch::patch(target, &ops).map_err(|e| PatchError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests;
