//! Durable state for Sluice.
#![warn(missing_docs)]

pub mod cursor;
pub mod event;
pub mod machine;
pub mod spec;
