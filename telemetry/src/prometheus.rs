//! Sluice's instruments read on demand and written in Prometheus' text
//! exposition format: the pull side of the same metrics the OTLP export
//! pushes. Install a [`PrometheusReader`] in the meter provider (the `sluice`
//! binary does so for `sluice run --console`), then [`PrometheusReader::render`]
//! at each scrape.
//!
//! Names follow Prometheus' conventions: dots become underscores, a unit of
//! seconds adds `_seconds`, of percent `_percent`, and a monotonic sum
//! (a counter) adds `_total`; attribute keys become labels the same way.

use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};

/// A metric reader that collects when asked, with cumulative temporality
/// (what Prometheus expects). Clones share one reader, so the copy given to
/// the meter provider and the one a scrape renders from read the same data.
#[derive(Clone, Debug, Default)]
pub struct PrometheusReader {
    reader: Arc<ManualReader>,
}

impl PrometheusReader {
    /// A reader not yet registered with a meter provider.
    pub fn new() -> Self {
        PrometheusReader::default()
    }

    /// Every metric the provider holds, except those named in `skip` (by
    /// their OpenTelemetry name), in the text exposition format. Empty when
    /// the reader is not registered or nothing was recorded.
    pub fn render(&self, skip: &[&str]) -> String {
        let mut collected = ResourceMetrics::default();
        if self.reader.collect(&mut collected).is_err() {
            return String::new();
        }
        let mut text = String::new();
        for scope in collected.scope_metrics() {
            for metric in scope.metrics().filter(|m| !skip.contains(&m.name())) {
                write_metric(&mut text, metric);
            }
        }
        text
    }
}

impl MetricReader for PrometheusReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.reader.register_pipeline(pipeline);
    }

    fn collect(&self, collected: &mut ResourceMetrics) -> OTelSdkResult {
        self.reader.collect(collected)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.reader.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.reader.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.reader.temporality(kind)
    }
}

/// Appends one metric family: its help and type lines, then its samples.
fn write_metric(text: &mut String, metric: &Metric) {
    match metric.data() {
        AggregatedMetrics::F64(data) => write_family(text, metric, data),
        AggregatedMetrics::U64(data) => write_family(text, metric, data),
        AggregatedMetrics::I64(data) => write_family(text, metric, data),
    }
}

fn write_family<T: Sample>(text: &mut String, metric: &Metric, data: &MetricData<T>) {
    let base = name(metric);
    let help = metric
        .description()
        .replace('\\', "\\\\")
        .replace('\n', "\\n");
    match data {
        MetricData::Gauge(gauge) => {
            let _ = writeln!(text, "# HELP {base} {help}\n# TYPE {base} gauge");
            for point in gauge.data_points() {
                let labels = labels(point.attributes(), None);
                let _ = writeln!(text, "{base}{labels} {}", point.value().text());
            }
        }
        MetricData::Sum(sum) => {
            let (name, kind) = if sum.is_monotonic() {
                (format!("{base}_total"), "counter")
            } else {
                (base, "gauge")
            };
            let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for point in sum.data_points() {
                let labels = labels(point.attributes(), None);
                let _ = writeln!(text, "{name}{labels} {}", point.value().text());
            }
        }
        MetricData::Histogram(histogram) => {
            let _ = writeln!(text, "# HELP {base} {help}\n# TYPE {base} histogram");
            for point in histogram.data_points() {
                let mut cumulative = 0;
                let bounds = point.bounds().map(|b| b.text()).chain(["+Inf".to_owned()]);
                for (bound, count) in bounds.zip(point.bucket_counts()) {
                    cumulative += count;
                    let labels = labels(point.attributes(), Some(&bound));
                    let _ = writeln!(text, "{base}_bucket{labels} {cumulative}");
                }
                let labels = labels(point.attributes(), None);
                let _ = writeln!(text, "{base}_sum{labels} {}", point.sum().text());
                let _ = writeln!(text, "{base}_count{labels} {}", point.count());
            }
        }
        // Sluice records no exponential histogram.
        MetricData::ExponentialHistogram(_) => {}
    }
}

/// A value as the text format writes it.
trait Sample: Copy {
    fn text(self) -> String;
}

impl Sample for f64 {
    fn text(self) -> String {
        if self == f64::INFINITY {
            "+Inf".into()
        } else if self == f64::NEG_INFINITY {
            "-Inf".into()
        } else {
            self.to_string()
        }
    }
}

impl Sample for u64 {
    fn text(self) -> String {
        self.to_string()
    }
}

impl Sample for i64 {
    fn text(self) -> String {
        self.to_string()
    }
}

/// The family's name: the metric's, with its unit where Prometheus names one.
fn name(metric: &Metric) -> String {
    let base = sanitize(metric.name());
    match metric.unit() {
        "s" => format!("{base}_seconds"),
        "%" => format!("{base}_percent"),
        _ => base,
    }
}

/// `{key="value",…}` from the attributes, sorted by key, with `le` last
/// when a bucket bound is given; empty when there are none.
fn labels<'a>(attributes: impl Iterator<Item = &'a KeyValue>, le: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> = attributes
        .map(|kv| (sanitize(kv.key.as_str()), escape(&kv.value.to_string())))
        .collect();
    pairs.sort();
    if let Some(le) = le {
        pairs.push(("le".into(), le.into()));
    }
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{{{}}}", inner.join(","))
}

/// A metric or label name: characters outside `[A-Za-z0-9_]` become `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A label value escaped as the text format requires.
pub fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    fn provider() -> (SdkMeterProvider, PrometheusReader) {
        let reader = PrometheusReader::new();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .build();
        (provider, reader)
    }

    #[test]
    fn a_counter_a_gauge_and_a_histogram_are_written_in_the_text_format() {
        let (provider, reader) = provider();
        let meter = provider.meter("sluice");
        let rows = meter
            .u64_counter("sluice.rows")
            .with_description("Rows")
            .build();
        let throttle = meter.u64_gauge("sluice.throttle").with_unit("%").build();
        let duration = meter
            .f64_histogram("sluice.sub_batch.duration")
            .with_unit("s")
            .with_boundaries(vec![0.01, 0.1])
            .build();
        let kind = [KeyValue::new("sluice.operation.kind", "delete\"aged")];
        rows.add(500, &kind);
        rows.add(250, &kind);
        throttle.record(40, &[KeyValue::new("sluice.operation.id", 7)]);
        for seconds in [0.005, 0.05, 0.05, 3.0] {
            duration.record(seconds, &kind);
        }
        let text = reader.render(&[]);
        for line in [
            "# HELP sluice_rows_total Rows",
            "# TYPE sluice_rows_total counter",
            "sluice_rows_total{sluice_operation_kind=\"delete\\\"aged\"} 750",
            "# TYPE sluice_throttle_percent gauge",
            "sluice_throttle_percent{sluice_operation_id=\"7\"} 40",
            "# TYPE sluice_sub_batch_duration_seconds histogram",
            "sluice_sub_batch_duration_seconds_bucket{sluice_operation_kind=\"delete\\\"aged\",le=\"0.01\"} 1",
            "sluice_sub_batch_duration_seconds_bucket{sluice_operation_kind=\"delete\\\"aged\",le=\"0.1\"} 3",
            "sluice_sub_batch_duration_seconds_bucket{sluice_operation_kind=\"delete\\\"aged\",le=\"+Inf\"} 4",
            "sluice_sub_batch_duration_seconds_sum{sluice_operation_kind=\"delete\\\"aged\"} 3.105",
            "sluice_sub_batch_duration_seconds_count{sluice_operation_kind=\"delete\\\"aged\"} 4",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }

    #[test]
    fn skipped_metrics_and_an_unregistered_reader_render_nothing() {
        assert_eq!(PrometheusReader::new().render(&[]), "");
        let (provider, reader) = provider();
        let gauge = provider
            .meter("sluice")
            .u64_gauge("sluice.operations")
            .build();
        gauge.record(3, &[]);
        assert!(reader.render(&[]).contains("sluice_operations 3"));
        assert_eq!(reader.render(&["sluice.operations"]), "");
    }
}
