//! Label selectors and taint tolerations, with Kubernetes' semantics.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::{Expression, Selector, SelectorExt};

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
    to_selector(sel).map(drop)
}

/// The selector as kube's `Selector`, which does the matching, or what the
/// API server would reject in it. Not kube's own conversion (`TryFrom`): it
/// takes an empty `In` set, values on `Exists` and empty keys, and its error
/// names neither the requirement nor the fix.
fn to_selector(sel: &LabelSelector) -> Result<Selector, SelectorError> {
    let labels = sel.match_labels.clone().unwrap_or_default();
    if labels.contains_key("") {
        return Err(SelectorError::EmptyLabelKey);
    }
    let mut selector = Selector::from_iter(labels);
    for (index, req) in expressions(sel).iter().enumerate() {
        let values = req.values.as_deref().filter(|v| !v.is_empty());
        let (key, operator) = (req.key.clone(), req.operator.clone());
        if req.key.is_empty() {
            return Err(SelectorError::EmptyExpressionKey { index });
        }
        let expression = match (req.operator.as_str(), values) {
            ("In", Some(v)) => Expression::In(key, v.iter().cloned().collect()),
            ("NotIn", Some(v)) => Expression::NotIn(key, v.iter().cloned().collect()),
            ("Exists", None) => Expression::Exists(key),
            ("DoesNotExist", None) => Expression::DoesNotExist(key),
            ("In" | "NotIn", None) => {
                return Err(SelectorError::MissingValues {
                    index,
                    key,
                    operator,
                });
            }
            ("Exists" | "DoesNotExist", Some(_)) => {
                return Err(SelectorError::UnexpectedValues {
                    index,
                    key,
                    operator,
                });
            }
            _ => {
                return Err(SelectorError::UnknownOperator {
                    index,
                    key,
                    operator,
                });
            }
        };
        selector.extend(expression);
    }
    Ok(selector)
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
    Ok(to_selector(sel)?.matches(labels))
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
