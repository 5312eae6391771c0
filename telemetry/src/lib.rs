//! Sluice's telemetry: how an operation's spans join one trace across
//! actors, runs and processes, the metrics it records, and (feature `otlp`)
//! the OpenTelemetry export configured by the standard `OTEL_*` variables.
//!
//! The runtime only emits: spans and events through `tracing`, metrics
//! through the global OpenTelemetry meter provider. Nothing is exported until
//! someone installs a subscriber and providers — the `sluice` binary with
//! [`export::Telemetry::install`], or an embedding application with its own.
#![warn(missing_docs)]

#[cfg(feature = "otlp")]
pub mod export;
pub mod metrics;
pub mod prometheus;
pub mod propagation;

pub use metrics::Metrics;
pub use prometheus::PrometheusReader;
pub use propagation::{continue_trace, stamp, traceparent};
