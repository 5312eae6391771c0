//! The metrics Sluice records through OpenTelemetry: rows changed, batch and
//! sub-batch durations, the current batch size and throttle state per
//! operation, and operations by status. Instruments come from the global
//! meter provider when [`Metrics::new`] is called, so a runtime must be
//! started after the provider is installed (until then they record nothing).

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram};

/// Histogram bucket bounds for durations in seconds, from a one-millisecond
/// sub-batch to a minute-long batch (the SDK's default bounds, meant for
/// milliseconds, would put nearly every sub-batch in the first bucket).
const SECONDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Sluice's instruments.
#[derive(Clone, Debug)]
pub struct Metrics {
    rows: Counter<u64>,
    batch_duration: Histogram<f64>,
    sub_batch_duration: Histogram<f64>,
    batch_size: Gauge<i64>,
    throttle: Gauge<u64>,
    operations: Gauge<u64>,
}

/// Which operation a measurement is about.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// Its id.
    pub operation_id: i64,
    /// Its kind.
    pub kind: &'a str,
    /// Its target table.
    pub table: &'a str,
}

impl Metrics {
    /// The instruments, from the global meter provider's `sluice` meter.
    pub fn new() -> Metrics {
        let meter = opentelemetry::global::meter("sluice");
        Metrics {
            rows: meter
                .u64_counter("sluice.rows")
                .with_unit("{row}")
                .with_description("Rows changed by committed sub-batches")
                .build(),
            batch_duration: meter
                .f64_histogram("sluice.batch.duration")
                .with_unit("s")
                .with_description("Work time of each succeeded batch")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            sub_batch_duration: meter
                .f64_histogram("sluice.sub_batch.duration")
                .with_unit("s")
                .with_description("Time of each sub-batch, committed or not")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            batch_size: meter
                .i64_gauge("sluice.batch.size")
                .with_unit("{row}")
                .with_description("The operation's current (adapted) batch size")
                .build(),
            throttle: meter
                .u64_gauge("sluice.throttle")
                .with_unit("%")
                .with_description(
                    "Share of the normal pace the health signal allows (100 normal, 0 stopped)",
                )
                .build(),
            operations: meter
                .u64_gauge("sluice.operations")
                .with_unit("{operation}")
                .with_description("Operations in the store by status")
                .build(),
        }
    }

    /// A committed sub-batch changed `rows` rows in `duration`.
    pub fn sub_batch(&self, subject: Subject<'_>, rows: u64, duration: std::time::Duration) {
        let attributes = attributes(subject);
        self.rows.add(rows, &attributes);
        self.sub_batch_duration
            .record(duration.as_secs_f64(), &attributes);
    }

    /// A sub-batch failed after `duration`.
    pub fn sub_batch_failed(&self, subject: Subject<'_>, duration: std::time::Duration) {
        let mut attributes = attributes(subject);
        attributes.push(KeyValue::new("error.type", "sub_batch_failed"));
        self.sub_batch_duration
            .record(duration.as_secs_f64(), &attributes);
    }

    /// A batch succeeded after `work` time; the operation's batch size is now `size`.
    pub fn batch(&self, subject: Subject<'_>, work: std::time::Duration, size: i64) {
        let attributes = attributes(subject);
        self.batch_duration.record(work.as_secs_f64(), &attributes);
        self.batch_size.record(size, &[operation_id(subject)]);
    }

    /// The pace the health signal allows the operation: 100 normal, 1–99
    /// throttled, 0 stopped.
    pub fn throttle(&self, subject: Subject<'_>, percent: u8) {
        let mut attributes = attributes(subject);
        attributes.push(operation_id(subject));
        self.throttle.record(u64::from(percent), &attributes);
    }

    /// `count` operations are in `status`.
    pub fn operations(&self, status: &'static str, count: u64) {
        self.operations
            .record(count, &[KeyValue::new("sluice.operation.status", status)]);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn attributes(subject: Subject<'_>) -> Vec<KeyValue> {
    vec![
        KeyValue::new("sluice.operation.kind", subject.kind.to_owned()),
        KeyValue::new("db.collection.name", subject.table.to_owned()),
    ]
}

fn operation_id(subject: Subject<'_>) -> KeyValue {
    KeyValue::new("sluice.operation.id", subject.operation_id)
}
