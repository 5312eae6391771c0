use sluice::prelude::*;

#[derive(Serialize, Deserialize)] pub struct DoneTodos { pub user_id: i64, pub before: DateTime<Utc> }

/// GitLab's DeleteAllDoneTodos: one user's done todos completed before a time.
pub struct DeleteAllDoneTodos;

#[async_trait]
impl Operation for DeleteAllDoneTodos {
    type Arguments = DoneTodos;
    fn kind(&self) -> &'static str { "delete-all-done-todos" }
    fn shape(&self, todos: &DoneTodos) -> Result<Shape, OperationError> {
        let done = Filter::new().eq("user_id", todos.user_id).eq("state", "done");
        Shape::range("todos", "id")?.scope(done.lt("completed_at", todos.before))
    }
    async fn run(&self, _: &DoneTodos, rows: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        rows.delete().await
    }
}
