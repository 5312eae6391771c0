//! Sluice's operations: what a batched operation does to its table.
//!
//! This crate grows the operation trait, the batching strategies and the
//! built-in operations; today it holds the input parsing they share.
#![warn(missing_docs)]

pub mod duration;
pub mod target;

pub use duration::{DurationError, parse_duration};
pub use target::{Target, TargetError, check_index, check_target};
