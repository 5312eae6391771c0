//! [`OperationStatus`]: the states of the operation state machine and
//! their stored names.

use serde::{Deserialize, Serialize};

/// Where an operation is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OperationStatus {
    /// Waiting for a node to run it.
    Pending,
    /// Held by a node that plans and runs its batches.
    Running,
    /// Stopped by an operator; nothing runs until it is resumed.
    Paused,
    /// Stopped by an error; an operator may retry it.
    Failed,
    /// Every batch is done.
    Finished,
    /// Stopped for good by an operator.
    Cancelled,
}

impl OperationStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [OperationStatus; 6] = [
        OperationStatus::Pending,
        OperationStatus::Running,
        OperationStatus::Paused,
        OperationStatus::Failed,
        OperationStatus::Finished,
        OperationStatus::Cancelled,
    ];

    /// The lower-case name stored in the database and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationStatus::Pending => "pending",
            OperationStatus::Running => "running",
            OperationStatus::Paused => "paused",
            OperationStatus::Failed => "failed",
            OperationStatus::Finished => "finished",
            OperationStatus::Cancelled => "cancelled",
        }
    }

    /// Parses [`OperationStatus::as_str`]'s form.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// True while the operation still has work ahead without an operator:
    /// pending, running or paused. Uniqueness holds among these.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            OperationStatus::Pending | OperationStatus::Running | OperationStatus::Paused
        )
    }

    /// True for finished and cancelled, which nothing leaves.
    pub fn is_terminal(self) -> bool {
        matches!(self, OperationStatus::Finished | OperationStatus::Cancelled)
    }
}
