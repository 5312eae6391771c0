//! How the actor carries out the driver's commands: store writes and reads,
//! the pool, its own mailbox. No decision is made here; a request's result
//! goes back to the driver as its answer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use ractor::{ActorProcessingErr, ActorRef};
use sluice_operations::{
    OperationError,
    batching::{explain_batch_query, keyset_columns, next_batch_end, nth_after},
};
use sluice_store::{Batch, Effect, Expected, NextBatch, OperationStatus};
use sluice_target::Cursor;

use super::driver::Now;
use super::phase::ActiveBatch;
use super::protocol::{Answer, Command, Input, NextPlan};
use super::{OperationMessage, OperationState};
use crate::context::Progress;
use crate::pool::SubBatchJob;

type Answered = Option<Result<Answer, OperationError>>;

impl OperationState {
    /// Feeds `input` to the driver and carries out its commands, each
    /// request's answer fed back in turn, until none is left.
    pub(super) async fn run(
        &mut self,
        myself: &ActorRef<OperationMessage>,
        input: Input,
    ) -> Result<(), ActorProcessingErr> {
        let mut queue: VecDeque<Command> = self.driver.on(input, now()).into();
        while let Some(command) = queue.pop_front() {
            if let Some(answer) = self.execute(myself, command).await? {
                for command in self
                    .driver
                    .on(Input::Answer(answer), now())
                    .into_iter()
                    .rev()
                {
                    queue.push_front(command);
                }
            }
        }
        Ok(())
    }

    /// Carries out one command; a request returns its answer.
    async fn execute(
        &mut self,
        myself: &ActorRef<OperationMessage>,
        command: Command,
    ) -> Result<Answered, ActorProcessingErr> {
        let store = &self.context.store;
        let config = &self.context.config;
        let answer = match command {
            Command::Record { event, lease } => store
                .append(
                    self.id,
                    Expected::Any,
                    lease.as_ref(),
                    std::slice::from_ref(&event),
                )
                .await
                .map(|appended| Answer::Appended {
                    event,
                    state: appended.record.state,
                })
                .map_err(OperationError::from),
            Command::Reload => store
                .operation(self.id)
                .await
                .map(|record| Answer::Reloaded {
                    holder: record.lease.map(|l| l.epoch),
                    state: record.state,
                })
                .map_err(OperationError::from),
            Command::Claim => match store
                .claim_batches(&config.node, Some(self.id), 1, config.lease_ttl)
                .await
            {
                Ok(batches) => match batches.into_iter().next() {
                    Some(batch) => self.activate(batch).map(|b| Answer::Claimed(Some(b))),
                    None => Ok(Answer::Claimed(None)),
                },
                Err(e) => Err(e.into()),
            },
            Command::CheckPlan { from, size } => {
                explain_batch_query(store, self.operation.shape(), from.as_ref(), size)
                    .await
                    .map(|looked| Answer::PlanChecked {
                        full_scan: looked.full_scan,
                        plan: looked.plan,
                    })
                    .map_err(OperationError::from)
            }
            Command::TakeRows { rows } => {
                let projection = self.driver.projection();
                store
                    .take_rows(self.id, &projection.kind, projection.fleet.as_deref(), rows)
                    .await
                    .map(Answer::RowsTaken)
                    .map_err(OperationError::from)
            }
            Command::ReadSettings { statistics } => self.read_settings(statistics).await,
            Command::PlanAhead(plan) => self.plan_ahead(&plan).await,
            Command::PlanAndClaim(plan) => self.plan_and_claim(&plan).await,
            Command::Complete {
                lease,
                rows,
                busy,
                next_size,
                then_plan,
            } => {
                // Finding where the next batch ends must not keep this
                // batch's outcome from being recorded: on an error (or no row
                // left) the outcome goes alone, and the next step plans
                // again, where an error is handled as any request's.
                let next = match &then_plan {
                    Some(plan) => self.next_batch(plan).await.ok().flatten(),
                    None => None,
                };
                let written = match (next, then_plan) {
                    (Some(next), Some(plan)) => {
                        store
                            .complete_and_plan_batch(
                                &lease,
                                rows,
                                busy,
                                next_size,
                                &plan.owner,
                                &next,
                            )
                            .await
                    }
                    _ => store
                        .complete_batch(&lease, rows, busy, next_size)
                        .await
                        .map(|appended| (appended, None)),
                };
                match written {
                    Ok((appended, planned)) => {
                        self.batch_span.record("sluice.rows", rows);
                        let next = planned.map(|batch| self.activate(batch)).transpose();
                        next.map(|next| Answer::Completed {
                            state: appended.record.state,
                            next,
                        })
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Command::Split {
                lease,
                from,
                end,
                half,
                message,
                smaller,
            } => match self.split_point(from.as_ref(), &end, half).await {
                Ok(Some(at)) => {
                    tracing::warn!(parent: &self.batch_span, operation = self.id, ordinal = lease.ordinal, at = %at, "cutting the batch in two");
                    store
                        .split_batch(&lease, &at, &message, smaller)
                        .await
                        .map(|appended| Answer::BatchSplit(Some(appended.record.state)))
                        .map_err(OperationError::from)
                }
                Ok(None) => Ok(Answer::BatchSplit(None)),
                Err(e) => Err(e),
            },
            Command::FailBatch {
                lease,
                message,
                smaller,
            } => store
                .fail_batch(&lease, &message, true, smaller)
                .await
                .map(|appended| Answer::BatchFailed(appended.record.state))
                .map_err(OperationError::from),
            Command::FailBatchAndOperation {
                lease,
                message,
                error,
            } => store
                .fail_batch_and_operation(&lease, &message, &error)
                .await
                .map(|appended| Answer::OperationFailed {
                    by_this: appended
                        .effects
                        .contains(&Effect::NotifyTerminal(OperationStatus::Failed)),
                    state: appended.record.state,
                })
                .map_err(OperationError::from),
            Command::RenewLease(lease) => store
                .renew_lease(&lease, config.lease_ttl)
                .await
                .map(Answer::Renewed)
                .map_err(OperationError::from),
            Command::Dispatch(request) => {
                let job = SubBatchJob {
                    request,
                    operation: Arc::clone(&self.operation),
                    reply: myself.get_derived(),
                    batch_span: self.batch_span.clone(),
                    apart: store.target_apart().map(|_| store.clone()),
                };
                let sent = self.context.pool().is_some_and(|pool| pool.submit(job));
                Ok(Answer::Submitted(sent))
            }
            Command::RenewBatchLease(lease) => {
                let _ = store.renew_batch_lease(&lease, config.lease_ttl).await;
                return Ok(None);
            }
            Command::ReleaseBatch(lease) => {
                let _ = store.release_batch(&lease).await;
                return Ok(None);
            }
            Command::ScheduleStep(after) => {
                if after.is_zero() {
                    let _ = myself.cast(OperationMessage::Step);
                } else {
                    myself.send_after(after, || OperationMessage::Step);
                }
                return Ok(None);
            }
            Command::Report => {
                self.report();
                return Ok(None);
            }
            Command::Trace(note) => {
                self.tell(note);
                return Ok(None);
            }
            Command::Stop => {
                myself.stop(None);
                return Ok(None);
            }
            Command::Crash(error) => return Err(error.into()),
        };
        Ok(Some(answer))
    }

    /// Whether a rate limit applies now and, with `statistics`, the
    /// version of the target's planner statistics.
    async fn read_settings(&self, statistics: bool) -> Result<Answer, OperationError> {
        let store = &self.context.store;
        let projection = self.driver.projection();
        let limits = store
            .rate_limits_for(self.id, &projection.kind, projection.fleet.as_deref())
            .await?;
        let statistics = match statistics {
            true => {
                let table = self.operation.shape().table();
                store.target().statistics_version(table).await?
            }
            false => None,
        };
        Ok(Answer::SettingsRead {
            rate_limited: !limits.is_empty(),
            statistics,
        })
    }

    /// Plans the next range batch pending, for anyone to claim; `None` when
    /// no row is left.
    async fn plan_ahead(&self, plan: &NextPlan) -> Result<Answer, OperationError> {
        let Some(next) = self.next_batch(plan).await? else {
            return Ok(Answer::PlannedAhead(None));
        };
        let (_, appended) = self
            .context
            .store
            .plan_batch(&plan.owner, next.end, next.size)
            .await?;
        Ok(Answer::PlannedAhead(Some(appended.record.state)))
    }

    /// Plans the next batch and claims it in one commit; `None` when no row
    /// is left.
    async fn plan_and_claim(&mut self, plan: &NextPlan) -> Result<Answer, OperationError> {
        let Some(next) = self.next_batch(plan).await? else {
            return Ok(Answer::PlannedClaimed(None));
        };
        let (batch, appended) = self
            .context
            .store
            .plan_claimed_batch(&plan.owner, &next)
            .await?;
        let batch = self.activate(batch)?;
        Ok(Answer::PlannedClaimed(Some((batch, appended.record.state))))
    }

    /// The batch `plan` describes: for a range operation, up to the row
    /// `size` rows after its cursor (`None` when no row is left); for a
    /// loop, the next `size` rows that match.
    async fn next_batch(&self, plan: &NextPlan) -> Result<Option<NextBatch>, OperationError> {
        let end = if self.driver.settings.ranges {
            let end = next_batch_end(
                &self.context.store,
                self.operation.shape(),
                plan.from.as_ref(),
                plan.size,
            )
            .await?;
            if end.is_none() {
                return Ok(None);
            }
            end
        } else {
            None
        };
        Ok(Some(NextBatch {
            end,
            size: plan.size,
            ttl: self.context.config.lease_ttl,
        }))
    }

    /// Where to cut a range batch's remaining rows: the row `half` rows
    /// after `from`, if it lies before `end`.
    async fn split_point(
        &self,
        from: Option<&Cursor>,
        end: &Cursor,
        half: i64,
    ) -> Result<Option<Cursor>, OperationError> {
        let shape = self.operation.shape();
        let columns = keyset_columns(shape)?;
        let middle = nth_after(shape, columns, from, Some(end), half);
        let at = self
            .context
            .store
            .target()
            .fetch_cursor(&middle, columns.len())
            .await?;
        Ok(at.filter(|at| at < end))
    }

    /// A batch the store handed this actor, with its span (a child of the
    /// run's span) as the batch span from now on.
    fn activate(&mut self, batch: Batch) -> Result<ActiveBatch, OperationError> {
        let text =
            |cursor: &Option<Cursor>| cursor.as_ref().map_or_else(String::new, Cursor::to_string);
        self.batch_span = tracing::info_span!(
            parent: &self.run_span,
            "batch",
            otel.name = %format!("batch {}", batch.ordinal),
            sluice.batch.ordinal = batch.ordinal,
            sluice.batch.start = %text(&batch.start),
            sluice.batch.end = %text(&batch.end),
            sluice.batch.size = batch.batch_size,
            sluice.batch.attempt = batch.attempts,
            sluice.rows = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        ActiveBatch::claimed(batch)
    }

    /// Publishes the operation's progress (and its end, once terminal).
    pub(super) fn report(&self) {
        let p = self.driver.projection();
        let held_back = match self.driver.signal() {
            crate::health::Signal::Normal => self
                .driver
                .rate_binding()
                .map(|limit| format!("rate-limited: {} rows/s", limit.rows_per_second)),
            crate::health::Signal::Throttle { percent, reason } => {
                Some(format!("throttled to {percent}%: {reason}"))
            }
            crate::health::Signal::Stop { reason } => Some(format!("stopped: {reason}")),
        };
        let _ = self.context.progress.send(Progress {
            operation_id: self.id,
            kind: p.kind.clone(),
            status: p.status,
            rows_done: p.rows_done + self.driver.rows_in_batch(),
            estimated_rows: p.estimated_rows,
            batches: p.batches_succeeded,
            batch_size: p.batch_size,
            held_back,
        });
        if p.status.is_terminal() {
            let _ = self.context.ended.send(self.id);
        }
    }
}

/// The moment, and a jitter fraction in `[0, 1)` from the clock's
/// sub-second noise (no RNG dependency needed for spreading retries).
fn now() -> Now {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Now {
        at: Instant::now(),
        wall: chrono::Utc::now(),
        jitter: f64::from(nanos % 1_000) / 1_000.0,
    }
}
