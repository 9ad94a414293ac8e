//! Label selectors and taint tolerations, with Kubernetes' semantics.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::PlanError;
use super::pod::Toleration;

/// What is wrong with a label selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "matchExpressions[{index}] (key {key:?}) has operator {operator:?}; use In, NotIn, Exists or DoesNotExist"
    )]
    UnknownOperator {
        index: usize,
        key: String,
        operator: String,
    },
    #[error(
        "matchExpressions[{index}] (key {key:?}, operator {operator}) has no values; give at least one"
    )]
    MissingValues {
        index: usize,
        key: String,
        operator: String,
    },
    #[error("matchExpressions[{index}] (key {key:?}, operator {operator}) has values; remove them")]
    UnexpectedValues {
        index: usize,
        key: String,
        operator: String,
    },
    #[error("matchExpressions[{index}] has an empty key; name the label to test")]
    EmptyExpressionKey { index: usize },
    #[error("matchLabels has an empty key; name the label to match")]
    EmptyLabelKey,
}

/// Checks a selector the way the API server validates one.
pub(crate) fn validate_selector(sel: &LabelSelector) -> Result<(), SelectorError> {
    if sel
        .match_labels
        .as_ref()
        .is_some_and(|m| m.contains_key(""))
    {
        return Err(SelectorError::EmptyLabelKey);
    }
    for (index, req) in expressions(sel).iter().enumerate() {
        let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
        let (key, operator) = (req.key.clone(), req.operator.clone());
        if req.key.is_empty() {
            return Err(SelectorError::EmptyExpressionKey { index });
        }
        match req.operator.as_str() {
            "In" | "NotIn" if !has_values => {
                return Err(SelectorError::MissingValues {
                    index,
                    key,
                    operator,
                });
            }
            "Exists" | "DoesNotExist" if has_values => {
                return Err(SelectorError::UnexpectedValues {
                    index,
                    key,
                    operator,
                });
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => {
                return Err(SelectorError::UnknownOperator {
                    index,
                    key,
                    operator,
                });
            }
        }
    }
    Ok(())
}

fn expressions(sel: &LabelSelector) -> &[LabelSelectorRequirement] {
    sel.match_expressions.as_deref().unwrap_or_default()
}

/// Whether `labels` satisfy `sel`: every matchLabels pair and every
/// matchExpressions requirement (ANDed); an empty selector matches everything.
///
/// A malformed selector is an error even if an earlier requirement already
/// fails, so the answer never depends on the pod being tested.
pub fn selector_matches(
    sel: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, PlanError> {
    validate_selector(sel)?;
    let labels_match = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = expressions(sel).iter().all(|req| {
        let value = labels.get(&req.key);
        let listed = |v: &String| req.values.iter().flatten().any(|x| x == v);
        match req.operator.as_str() {
            "In" => value.is_some_and(listed),
            // As in Kubernetes: a pod without the label is "not in" the set.
            "NotIn" => !value.is_some_and(listed),
            "Exists" => value.is_some(),
            _ => value.is_none(), // DoesNotExist; others were rejected above
        }
    });
    Ok(labels_match && expressions_match)
}

/// Whether `tol` tolerates a taint `key=value:effect`, exactly as the
/// Kubernetes scheduler decides it (`Toleration.ToleratesTaint`).
pub fn tolerates(tol: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    // An empty effect tolerates every effect; an empty key (with Exists) every key.
    if !tol.effect.is_empty() && tol.effect != effect {
        return false;
    }
    if !tol.key.is_empty() && tol.key != key {
        return false;
    }
    match tol.operator.as_str() {
        "" | "Equal" => tol.value == value,
        "Exists" => true,
        _ => false,
    }
}
