//! Patch machinery of the simulated API server: the four PATCH content types
//! Kubernetes accepts and the field ownership (`metadata.managedFields`) that
//! server-side apply and every other write maintain.
//!
//! Everything here is pure: `serde_json::Value` in, `Value` out, no I/O, no
//! clock (the caller passes `now`). The HTTP layer maps [`PatchError`] to a
//! `Status`: `BadRequest` → 400, `Conflict` → 409 (reason `Conflict`, causes of
//! type `FieldManagerConflict`), `Invalid` → 422.
//!
//! | content type                              | function                  |
//! |-------------------------------------------|---------------------------|
//! | `application/merge-patch+json`            | [`merge_patch`]           |
//! | `application/json-patch+json`             | [`json_patch()`]          |
//! | `application/strategic-merge-patch+json`  | [`strategic_merge_patch`] |
//! | `application/apply-patch+yaml`            | [`apply`]                 |
//!
//! Kubernetes answers a strategic merge patch to a custom resource with 415
//! Unsupported Media Type; the store should too (use [`ListSchema::from_openapi_v3`]
//! for their apply and merge semantics, [`ListSchema::builtin`] for built-ins).
//!
//! After a non-apply write (create, update, the three patch types) the store
//! calls [`record_update`] so the writer owns what it changed, as Kubernetes'
//! field manager does for `Update` operations.

mod apply;
mod apply_merge;
mod fieldset;
mod json;
mod managed;
mod schema;
mod strategic;
#[cfg(test)]
mod tests;

pub use apply::{apply, record_update};
pub use json::{json_patch, merge_patch};
pub use schema::{ListKind, ListSchema};
pub use strategic::strategic_merge_patch;

/// Why a patch could not be applied; each variant is one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400: the patch document itself is malformed (wrong JSON shape, an
    /// unknown `$patch` directive, a list element without its merge key).
    #[error("bad patch: {0}")]
    BadRequest(String),
    /// 409: server-side apply would change fields another manager owns.
    /// `message` is Kubernetes' wording; `causes` are (field path, message)
    /// pairs, e.g. (`.status.foo`, `conflict with "mgr"`).
    #[error("{message}")]
    Conflict {
        message: String,
        causes: Vec<(String, String)>,
    },
    /// 422: a well-formed patch that cannot apply to this object (a failed
    /// JSON-patch `test`, a path that does not exist, a list whose items miss
    /// their key fields).
    #[error("invalid patch: {0}")]
    Invalid(String),
}
