//! The operation machine's batch transitions: planning a batch from the
//! cursor and splitting one, each checked against what the projection knows.

use super::*;

pub(super) fn plan_batch(
    next: &mut Projection,
    ordinal: i64,
    start: Option<&Cursor>,
    end: Option<&Cursor>,
    size: i64,
) -> Result<(), IllegalTransition> {
    if ordinal != next.batches_planned + 1 {
        return Err(IllegalTransition::BatchOrdinal {
            ordinal,
            planned: next.batches_planned,
        });
    }
    positive("batch_planned", "size", size)?;
    let order = |detail: String| IllegalTransition::CursorOrder { ordinal, detail };
    let width = next.batching_columns.len();
    for bound in [start, end].into_iter().flatten() {
        if bound.width() != width {
            return Err(order(format!(
                "cursor {bound} has {} value(s), expected {width}",
                bound.width()
            )));
        }
    }
    match (&next.cursor, start, end) {
        // Loop-based operations carry no cursor at all.
        (None, None, None) if width == 0 => {}
        (None, None, Some(_)) if width > 0 => {}
        (Some(cursor), Some(start), Some(_)) if start == cursor => {}
        (Some(cursor), start, _) => {
            let shown = start.map_or("the beginning".to_owned(), Cursor::to_string);
            return Err(order(format!(
                "starts at {shown} but the cursor is at {cursor}"
            )));
        }
        _ => {
            return Err(order(
                "a range batch needs an end cursor, a loop batch none".to_owned(),
            ));
        }
    }
    // Where text decides, the database's collation orders the cursors and
    // the batching SQL (`key > start ORDER BY key`) planned them forward.
    if let (Some(start), Some(end)) = (start, end)
        && matches!(end.known_cmp(start), Some(Ordering::Less | Ordering::Equal))
    {
        return Err(order(format!("end {end} is not after start {start}")));
    }
    if let (Some(min), Some(end)) = (&next.min_cursor, end)
        && end.known_cmp(min) == Some(Ordering::Less)
    {
        return Err(order(format!("end {end} is below min_cursor {min}")));
    }
    if let (Some(max), Some(end)) = (&next.max_cursor, end)
        && end.known_cmp(max) == Some(Ordering::Greater)
    {
        return Err(order(format!("end {end} is past max_cursor {max}")));
    }
    next.batches_planned = ordinal;
    if let Some(end) = end {
        next.cursor = Some(end.clone());
    }
    Ok(())
}

/// A split adds one batch behind the cursor: the halves of a range batch
/// already planned, so the cursor and the succeeded count stay.
pub(super) fn split_batch(
    next: &mut Projection,
    ordinal: i64,
    at: &Cursor,
    new_ordinal: i64,
) -> Result<(), IllegalTransition> {
    check_known_batch(next, ordinal)?;
    if new_ordinal != next.batches_planned + 1 {
        return Err(IllegalTransition::BatchOrdinal {
            ordinal: new_ordinal,
            planned: next.batches_planned,
        });
    }
    let order = |detail: String| IllegalTransition::CursorOrder { ordinal, detail };
    let width = next.batching_columns.len();
    if width == 0 || at.width() != width {
        return Err(order(format!(
            "split point {at} must have one value per batching column ({width})"
        )));
    }
    match &next.cursor {
        Some(cursor)
            if !matches!(
                at.known_cmp(cursor),
                Some(Ordering::Greater | Ordering::Equal)
            ) => {}
        Some(cursor) => {
            return Err(order(format!(
                "split point {at} is not behind the cursor {cursor}"
            )));
        }
        None => return Err(order("no batch range has been planned to split".into())),
    }
    next.batches_planned = new_ordinal;
    Ok(())
}

pub(super) fn check_known_batch(next: &Projection, ordinal: i64) -> Result<(), IllegalTransition> {
    if ordinal < 1 || ordinal > next.batches_planned {
        return Err(IllegalTransition::BatchOrdinal {
            ordinal,
            planned: next.batches_planned,
        });
    }
    Ok(())
}
