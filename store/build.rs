//! Rebuilds the store when a migration is added or changed: `sqlx::migrate!`
//! embeds the migration folders at compile time.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
