//! The batch lifecycle as a pure state machine: [`next_status`] decides
//! every change of a batch's status, and the store's statements only
//! persist what it decided (each binds the status it returned, and keeps
//! the status it was decided from as its condition, beside the lease).

use crate::machine::OperationStatus;

/// Where a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchStatus {
    /// Planned, waiting to be claimed (again, after a retryable failure).
    Pending,
    /// Claimed by a node under a lease.
    Running,
    /// Done.
    Succeeded,
    /// Failed for good (until an operator retries the operation).
    Failed,
}

impl BatchStatus {
    /// The lower-case name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Pending => "pending",
            BatchStatus::Running => "running",
            BatchStatus::Succeeded => "succeeded",
            BatchStatus::Failed => "failed",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [
            BatchStatus::Pending,
            BatchStatus::Running,
            BatchStatus::Succeeded,
            BatchStatus::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// What happens to a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchChange {
    /// Planned, for any worker to claim (an owner planning ahead for helpers).
    PlannedAhead,
    /// Planned and claimed by its planner in one commit.
    PlannedClaimed,
    /// Claimed: pending, or running under a lease that lapsed (taken over).
    Claimed {
        /// The running batch's lease has lapsed.
        lease_lapsed: bool,
    },
    /// Its holder gave it back unused (a shutdown, a restart): not an attempt.
    Released,
    /// Every sub-batch of it is done.
    Completed,
    /// An attempt failed and is recorded.
    AttemptFailed {
        /// The attempts are spent: the batch fails for good, with its operation.
        last: bool,
        /// The operation's status when the failure is recorded.
        operation: OperationStatus,
    },
    /// A range that kept timing out is cut in two (both halves pending).
    Split,
    /// The operation was retried: its failed batches run again.
    Requeued,
}

/// Why a change does not apply to a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a batch {} cannot be {change:?}", from.map_or("not yet planned", BatchStatus::as_str))]
pub struct IllegalBatchChange {
    /// Its status (`None`: not planned yet).
    pub from: Option<BatchStatus>,
    /// The change refused.
    pub change: BatchChange,
}

/// The status a batch in `from` (`None`: not planned yet) has after
/// `change`, or why the change does not apply. `succeeded` is final; a
/// `failed` batch only leaves by its operation's retry; only a running
/// batch (its holder) records an outcome. A last failed attempt of an
/// operation paused meanwhile leaves the batch pending: the operation
/// cannot fail while paused, so the batch waits as a retry, which fails it
/// if it fails again after the resume.
pub fn next_status(
    from: Option<BatchStatus>,
    change: BatchChange,
) -> Result<BatchStatus, IllegalBatchChange> {
    use BatchChange as C;
    use BatchStatus as S;
    let to = match (from, change) {
        (None, C::PlannedAhead) => S::Pending,
        (None, C::PlannedClaimed) => S::Running,
        (Some(S::Pending), C::Claimed { .. }) => S::Running,
        (Some(S::Running), C::Claimed { lease_lapsed: true }) => S::Running,
        (Some(S::Running), C::Released | C::Split) => S::Pending,
        (Some(S::Running), C::Completed) => S::Succeeded,
        (Some(S::Running), C::AttemptFailed { last: false, .. }) => S::Pending,
        (
            Some(S::Running),
            C::AttemptFailed {
                last: true,
                operation: OperationStatus::Paused,
            },
        ) => S::Pending,
        (Some(S::Running), C::AttemptFailed { last: true, .. }) => S::Failed,
        (Some(S::Failed), C::Requeued) => S::Pending,
        _ => return Err(IllegalBatchChange { from, change }),
    };
    Ok(to)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const STATUSES: [OperationStatus; 6] = [
        OperationStatus::Pending,
        OperationStatus::Running,
        OperationStatus::Paused,
        OperationStatus::Finished,
        OperationStatus::Failed,
        OperationStatus::Cancelled,
    ];

    fn change() -> impl Strategy<Value = BatchChange> {
        prop_oneof![
            Just(BatchChange::PlannedAhead),
            Just(BatchChange::PlannedClaimed),
            any::<bool>().prop_map(|lease_lapsed| BatchChange::Claimed { lease_lapsed }),
            Just(BatchChange::Released),
            Just(BatchChange::Completed),
            (any::<bool>(), 0..STATUSES.len()).prop_map(|(last, i)| BatchChange::AttemptFailed {
                last,
                operation: STATUSES[i],
            }),
            Just(BatchChange::Split),
            Just(BatchChange::Requeued),
        ]
    }

    #[test]
    fn each_change_from_each_status() {
        use BatchChange as C;
        use BatchStatus as S;
        let failed = |last, operation| C::AttemptFailed { last, operation };
        let cases = [
            (None, C::PlannedAhead, Some(S::Pending)),
            (None, C::PlannedClaimed, Some(S::Running)),
            (None, C::Completed, None),
            (
                Some(S::Pending),
                C::Claimed {
                    lease_lapsed: false,
                },
                Some(S::Running),
            ),
            (
                Some(S::Running),
                C::Claimed {
                    lease_lapsed: false,
                },
                None,
            ),
            (
                Some(S::Running),
                C::Claimed { lease_lapsed: true },
                Some(S::Running),
            ),
            (Some(S::Running), C::Completed, Some(S::Succeeded)),
            (Some(S::Pending), C::Completed, None),
            (Some(S::Running), C::Released, Some(S::Pending)),
            (Some(S::Pending), C::Released, None),
            (Some(S::Running), C::Split, Some(S::Pending)),
            (
                Some(S::Running),
                failed(false, OperationStatus::Running),
                Some(S::Pending),
            ),
            (
                Some(S::Running),
                failed(true, OperationStatus::Running),
                Some(S::Failed),
            ),
            (
                Some(S::Running),
                failed(true, OperationStatus::Paused),
                Some(S::Pending),
            ),
            (
                Some(S::Running),
                failed(true, OperationStatus::Failed),
                Some(S::Failed),
            ),
            (
                Some(S::Running),
                failed(true, OperationStatus::Cancelled),
                Some(S::Failed),
            ),
            (Some(S::Failed), C::Requeued, Some(S::Pending)),
            (Some(S::Succeeded), C::Requeued, None),
            (Some(S::Failed), C::Claimed { lease_lapsed: true }, None),
        ];
        for (from, change, to) in cases {
            assert_eq!(next_status(from, change).ok(), to, "{from:?} {change:?}");
        }
    }

    proptest! {
        /// Any sequence of changes, each applied where legal: a succeeded
        /// batch never changes again, a failed one only by a retry, and
        /// only a running batch records an outcome.
        #[test]
        fn any_history_keeps_the_lifecycle(changes in proptest::collection::vec(change(), 1..40)) {
            let mut status: Option<BatchStatus> = None;
            for change in changes {
                match next_status(status, change) {
                    Ok(to) => {
                        prop_assert_ne!(status, Some(BatchStatus::Succeeded));
                        if status == Some(BatchStatus::Failed) {
                            prop_assert_eq!(change, BatchChange::Requeued);
                        }
                        if matches!(change, BatchChange::Completed | BatchChange::AttemptFailed { .. } | BatchChange::Released | BatchChange::Split) {
                            prop_assert_eq!(status, Some(BatchStatus::Running));
                        }
                        if let BatchChange::AttemptFailed { operation: OperationStatus::Paused, .. } = change {
                            prop_assert_eq!(to, BatchStatus::Pending);
                        }
                        status = Some(to);
                    }
                    Err(refused) => {
                        prop_assert_eq!(refused.from, status);
                        prop_assert_eq!(refused.change, change);
                    }
                }
            }
        }
    }
}
