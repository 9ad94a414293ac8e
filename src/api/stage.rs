//! `spec.stage`, read leniently: a stage this agent does not know is kept
//! (and reported by validation) rather than failing to decode the object.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How far a maintenance goes. `Idle < Cordon < Drain`; `Complete` ends it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Selected, nothing to do yet.
    #[default]
    Idle,
    /// Cordon and taint the node.
    Cordon,
    /// Cordon, taint and run the drain plan.
    Drain,
    /// Done: undo (uncordon, untaint, restore static pods).
    Complete,
    /// A value this version does not know (rejected by validation).
    Unknown(String),
}

/// The stage names the API accepts, in order.
pub const STAGES: [&str; 4] = ["Idle", "Cordon", "Drain", "Complete"];

impl Stage {
    pub fn as_str(&self) -> &str {
        match self {
            Stage::Idle => "Idle",
            Stage::Cordon => "Cordon",
            Stage::Drain => "Drain",
            Stage::Complete => "Complete",
            Stage::Unknown(s) => s,
        }
    }

    /// Position among the stages that ask for something (`Idle` 0,
    /// `Cordon` 1, `Drain` 2); `None` for `Complete` and unknown stages.
    pub fn rank(&self) -> Option<u8> {
        match self {
            Stage::Idle => Some(0),
            Stage::Cordon => Some(1),
            Stage::Drain => Some(2),
            Stage::Complete | Stage::Unknown(_) => None,
        }
    }
}

impl From<&str> for Stage {
    fn from(s: &str) -> Self {
        match s {
            "Idle" => Stage::Idle,
            "Cordon" => Stage::Cordon,
            "Drain" => Stage::Drain,
            "Complete" => Stage::Complete,
            other => Stage::Unknown(other.to_string()),
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Stage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Stage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Stage::from(s.as_str()))
    }
}

impl JsonSchema for Stage {
    fn schema_name() -> Cow<'static, str> {
        "Stage".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "enum": STAGES,
            "description": "Idle: nothing yet. Cordon: cordon and taint. Drain: also run the drain plan. Complete: done; undo.",
        })
    }

    fn inline_schema() -> bool {
        true
    }
}
