//! A sub-batch that is one statement on PostgreSQL: the change and its
//! record fused into one statement (`WITH changed AS (…), recorded AS
//! (UPDATE sluice_batches …)`), all or nothing as a transaction holding the
//! two would be; and a loop sub-batch's statement run on a bounded session.

use super::*;

/// The body of [`SubBatchSession::run_loop_sub_batch_statement`] on a
/// bounded session's `connection`.
pub(super) async fn loop_statement(
    connection: &mut TargetConnection,
    lease: &BatchLease,
    statement: &Statement,
    limit: i64,
    coordinator: Option<&str>,
) -> Result<u64, StoreError> {
    const FENCE: &str = "EXISTS (SELECT 1 FROM recorded)";
    let mut params = statement.params().to_vec();
    params.extend([limit.into(), lease.batch_id.into(), lease.epoch.into()]);
    let record = counted(params.len() - 2, &mut params, coordinator);
    let head = SqlText::new("WITH recorded AS (")
        .append(&record)
        .push(" RETURNING 1) ");
    let fused = match statement.guarded_by(FENCE) {
        Some(guarded) => head.append(&guarded),
        None => head.append(statement.text()).push(" AND ").push(FENCE),
    };
    let changed = connection
        .execute(&Statement::with_text(fused, params))
        .await?;
    let difference = i64::try_from(changed).unwrap_or(i64::MAX) - limit;
    if difference == 0 {
        return Ok(changed);
    }
    // The record counted `limit` rows; set it to what changed. Nothing
    // changed and no batch row to set right: the lease was lost before the
    // statement, which then kept nothing.
    let mut params = vec![difference.into(), lease.batch_id.into(), lease.epoch.into()];
    let correction = Statement::with_text(counted(1, &mut params, coordinator), params);
    let corrected = connection.execute(&correction).await?;
    if corrected == 0 && changed == 0 {
        return Err(batch_lease_lost(lease));
    }
    Ok(changed)
}

/// `statement` and its record in the sub-batch transaction `tx`, from
/// progress `from`: both are kept, or neither.
pub(super) async fn write_in(
    tx: sluice_target::TargetTx<'_>,
    lease: &BatchLease,
    statement: &Statement,
    from: Option<&Cursor>,
    progress: Option<&Cursor>,
    coordinator: Option<&str>,
) -> Result<u64, StoreError> {
    let mut sub_batch = SubBatchTx::new(tx, lease, from, coordinator);
    let rows = sub_batch.execute(statement).await?;
    sub_batch
        .commit(progress, i64::try_from(rows).unwrap_or(i64::MAX))
        .await?;
    Ok(rows)
}

/// `WITH changed AS (<statement> RETURNING 1), recorded AS (<the fenced
/// progress update>) SELECT rows changed, 1 / rows recorded`: the division
/// fails (SQLSTATE 22012) and aborts everything when the fence matched no
/// batch row. The four parameters after the statement's own are the
/// progress cursor (JSON or NULL), the batch id, its lease epoch and the
/// progress the sub-batch started from (JSON or NULL); a fifth, the
/// coordinator's name, when the record goes to a target's progress table.
pub(super) fn fused_with_record(
    statement: &Statement,
    lease: &BatchLease,
    from: Option<&Cursor>,
    progress: Option<&Cursor>,
    coordinator: Option<&str>,
) -> Statement {
    let n = statement.params().len();
    let json = |cursor: Option<&Cursor>| cursor.map_or(SqlValue::Null, |c| c.to_json().into());
    let mut params = statement.params().to_vec();
    params.extend([
        json(progress),
        lease.batch_id.into(),
        lease.epoch.into(),
        json(from),
    ]);
    // The statement's own `WITH` first: PostgreSQL takes a data-changing
    // one only at the top.
    let (lead, main) = statement.split_main();
    let text = match lead {
        Some(lead) => lead.push(", changed AS ("),
        None => SqlText::new("WITH changed AS ("),
    };
    let text = text
        .append(&main)
        .push(" RETURNING 1), recorded AS (")
        .append(&update_progress(coordinator))
        .push("progress_cursor = COALESCE(")
        .param(n + 1)
        .push("::TEXT, progress_cursor), rows_affected = rows_affected + (SELECT COUNT(*) FROM changed) WHERE id = ")
        .param(n + 2)
        .push(" AND lease_epoch = ")
        .param(n + 3)
        .push(" AND status = 'running' AND COALESCE(progress_cursor, start_cursor, '') = COALESCE(")
        .param(n + 4)
        .push("::TEXT, '')");
    let text = coordinated(text, &mut params, coordinator).push(
        " RETURNING 1) SELECT (SELECT COUNT(*) FROM changed), 1 / (SELECT COUNT(*) FROM recorded)",
    );
    Statement::with_text(text, params)
}

/// `UPDATE sluice_batches SET rows_affected = rows_affected + $first WHERE
/// id = $first+1 AND lease_epoch = $first+2 AND status = 'running'`: a loop
/// sub-batch's count, fenced by its batch lease (in a target's progress
/// table, also narrowed to the coordinator's rows, its name pushed on
/// `params`).
fn counted(first: usize, params: &mut Vec<SqlValue>, coordinator: Option<&str>) -> SqlText {
    let text = update_progress(coordinator)
        .push("rows_affected = rows_affected + ")
        .param(first)
        .push(" WHERE id = ")
        .param(first + 1)
        .push(" AND lease_epoch = ")
        .param(first + 2)
        .push(" AND status = 'running'");
    coordinated(text, params, coordinator)
}

pub(super) fn is_division_by_zero(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|d| d.code().as_deref() == Some("22012"))
}
