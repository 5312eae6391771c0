//! Installing telemetry for the `sluice` binary, or for an application that
//! wants Sluice's own set-up: logs to stderr (text or JSON), and — only when
//! configured — spans and metrics exported over OTLP.
//!
//! Configuration follows the OpenTelemetry SDK's standard variables:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! turns export on; `OTEL_EXPORTER_OTLP_PROTOCOL` picks `grpc` or
//! `http/protobuf` (the default); `OTEL_SERVICE_NAME` names the service
//! (`sluice` otherwise); `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`
//! choose the sampler; `OTEL_SDK_DISABLED=true` turns it all off. With none
//! of them set no exporter is built and nothing is said about it.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

pub use opentelemetry_otlp::Protocol;

use crate::PrometheusReader;

/// How log lines on stderr are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event, with the fields of the spans it happened
    /// in — Sluice's spans carry `trace_id` and `span_id`.
    Json,
}

/// Where spans and metrics go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Export {
    /// As the standard `OTEL_*` variables say (see the module docs).
    #[default]
    FromEnvironment,
    /// To this OTLP endpoint with this protocol (for tests, or an
    /// application configuring in code). For HTTP the signal paths
    /// (`/v1/traces`, `/v1/metrics`) are appended.
    To {
        /// `http://host:port`.
        endpoint: String,
        /// gRPC or HTTP/protobuf.
        protocol: Protocol,
    },
    /// Nowhere.
    Off,
}

/// What [`Telemetry::install`] sets up.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// How logs are written.
    pub log_format: LogFormat,
    /// The log filter when `RUST_LOG` is not set.
    pub default_log_filter: String,
    /// Where spans and metrics go.
    pub export: Export,
    /// How often metrics are exported.
    pub metric_interval: Duration,
    /// A reader the metrics are also collected into on demand (for a
    /// Prometheus scrape), exported or not.
    pub pull: Option<PrometheusReader>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            log_format: LogFormat::Text,
            default_log_filter: "warn,ractor=warn,sqlx=error".into(),
            export: Export::FromEnvironment,
            metric_interval: Duration::from_secs(10),
            pull: None,
        }
    }
}

/// Installed telemetry. [`Telemetry::shutdown`] exports what is still
/// buffered; dropping it without that may lose the last spans.
#[derive(Debug)]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

/// Why telemetry could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// An OTLP exporter could not be built (a malformed endpoint, say).
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A global subscriber is already installed.
    #[error("a tracing subscriber is already installed: {0}")]
    Subscriber(String),
}

impl Telemetry {
    /// Installs the global `tracing` subscriber (logs to stderr, filtered by
    /// `RUST_LOG`; plus, when exporting, an OpenTelemetry layer for the
    /// spans at INFO and above of everything but the exporter's own
    /// transport and the actor framework's per-message spans) and the
    /// global meter provider. Must run inside a tokio runtime when the
    /// gRPC exporter may be chosen.
    pub fn install(config: TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        let resource = resource();
        let (tracer, push) = match exporters(&config.export)? {
            Some((spans, metrics)) => {
                let tracer = SdkTracerProvider::builder()
                    .with_batch_exporter(spans)
                    .with_resource(resource.clone())
                    .build();
                let reader = PeriodicReader::builder(metrics)
                    .with_interval(config.metric_interval)
                    .build();
                (Some(tracer), Some(reader))
            }
            None => (None, None),
        };
        let meter = (push.is_some() || config.pull.is_some()).then(|| {
            let mut builder = SdkMeterProvider::builder().with_resource(resource);
            if let Some(push) = push {
                builder = builder.with_reader(push);
            }
            if let Some(pull) = config.pull.clone() {
                builder = builder.with_reader(pull);
            }
            builder.build()
        });
        let logs = EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(&config.default_log_filter));
        let fmt = match config.log_format {
            LogFormat::Text => tracing_subscriber::fmt::layer()
                // Colour codes only for a person at a terminal, never in a
                // file or a pipe a log collector reads.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr)
                .with_filter(logs)
                .boxed(),
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(std::io::stderr)
                .with_filter(logs)
                .boxed(),
        };
        let spans = tracer.as_ref().map(|provider| {
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("sluice"))
                .with_filter(exported_targets())
        });
        Registry::default()
            .with(fmt)
            .with(spans)
            .try_init()
            .map_err(|e| TelemetryError::Subscriber(e.to_string()))?;
        if let Some(meter) = &meter {
            opentelemetry::global::set_meter_provider(meter.clone());
        }
        Ok(Telemetry { tracer, meter })
    }

    /// True when spans and metrics are exported, or metrics collected for
    /// a pull reader: [`Telemetry::shutdown`] has work to do.
    pub fn is_exporting(&self) -> bool {
        self.tracer.is_some() || self.meter.is_some()
    }

    /// Exports what is buffered and stops the exporters. Blocks the calling
    /// thread (from async code, call it in `spawn_blocking`).
    pub fn shutdown(self) {
        if let Some(tracer) = self.tracer {
            let _ = tracer.force_flush();
            let _ = tracer.shutdown();
        }
        if let Some(meter) = self.meter {
            let _ = meter.force_flush();
            let _ = meter.shutdown();
        }
    }
}

/// The span and metric exporters `export` asks for, or `None` for none.
fn exporters(export: &Export) -> Result<Option<(SpanExporter, MetricExporter)>, TelemetryError> {
    match export {
        Export::Off => Ok(None),
        Export::FromEnvironment if !configured_by_environment() => Ok(None),
        // Endpoint, protocol, headers and timeouts from the environment.
        Export::FromEnvironment => Ok(Some((
            SpanExporter::builder().build()?,
            MetricExporter::builder().build()?,
        ))),
        Export::To { endpoint, protocol } => {
            let base = endpoint.trim_end_matches('/');
            Ok(Some(match protocol {
                Protocol::Grpc => (
                    SpanExporter::builder()
                        .with_tonic()
                        .with_endpoint(base)
                        .build()?,
                    MetricExporter::builder()
                        .with_tonic()
                        .with_endpoint(base)
                        .build()?,
                ),
                _ => (
                    SpanExporter::builder()
                        .with_http()
                        .with_protocol(*protocol)
                        .with_endpoint(format!("{base}/v1/traces"))
                        .build()?,
                    MetricExporter::builder()
                        .with_http()
                        .with_protocol(*protocol)
                        .with_endpoint(format!("{base}/v1/metrics"))
                        .build()?,
                ),
            }))
        }
    }
}

/// True when an OTLP endpoint is set and the SDK is not disabled.
fn configured_by_environment() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The service's resource: the SDK's detectors (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`), named `sluice` when no name is given.
fn resource() -> Resource {
    let builder = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty()) {
        builder.build()
    } else {
        builder.with_service_name("sluice").build()
    }
}

/// Spans worth exporting: INFO and above, without the exporter's own
/// transport (which would trace itself) and without the framework's
/// per-message and per-query spans (Sluice's own spans cover those).
fn exported_targets() -> Targets {
    let quiet = [
        "ractor",
        "sqlx",
        "h2",
        "hyper",
        "hyper_util",
        "tonic",
        "tower",
        "reqwest",
        "opentelemetry",
        "opentelemetry_sdk",
        "opentelemetry_otlp",
    ];
    quiet.iter().fold(
        Targets::new().with_default(LevelFilter::INFO),
        |targets, target| targets.with_target(*target, LevelFilter::OFF),
    )
}
