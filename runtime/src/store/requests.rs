//! The plain data callers hand the store to start work, in a leaf of its own: the workflows
//! wing starts what it describes, and a machine's forks and a worker's results build one.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// Start one template on one or more objects.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub template: String,
    pub objects: Vec<String>,
    /// Object version; defaults to the object's current version (1 for a new object).
    pub version: Option<i32>,
    pub priority: i32,
    pub lane: String,
    /// Not before this time; `None` is now.
    pub start_at: Option<DateTime<Utc>>,
    pub context: Value,
    pub actor: String,
    /// The machine job that forks these workflows.
    pub parent: Option<i64>,
}

impl StartRequest {
    pub fn new(template: &str, objects: &[&str]) -> Self {
        StartRequest {
            template: template.to_string(),
            objects: objects.iter().map(|o| o.to_string()).collect(),
            version: None,
            priority: 0,
            lane: "default".into(),
            start_at: None,
            context: Value::Object(Default::default()),
            actor: "workdo".into(),
            parent: None,
        }
    }
}
