//! Trace context across processes and restarts: an operation's trace is
//! started when it is enqueued, its W3C `traceparent` is stored with the
//! operation, and every run of it — on any node, after any crash — makes its
//! spans children of that stored context, so Jaeger shows the operation's
//! whole life as one trace.
//!
//! Everything here is a no-op when no OpenTelemetry layer is installed: the
//! spans then have no OpenTelemetry context and nothing is stored.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C `traceparent` (`00-<trace id>-<span id>-<flags>`) of `span`, or
/// `None` when the span has no valid OpenTelemetry context (no
/// OpenTelemetry layer installed, or the span is disabled).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `span` a child of the span `traceparent` names, so it joins that
/// trace. Returns false (and leaves `span` as it was) when the text is not
/// a valid `traceparent` or `span` is not recorded by OpenTelemetry.
pub fn continue_trace(span: &tracing::Span, traceparent: &str) -> bool {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    if !parent.span().span_context().is_valid() {
        return false;
    }
    span.set_parent(parent).is_ok()
}

/// Records the span's OpenTelemetry ids in its `trace_id` and `span_id`
/// fields (declared `Empty` when the span is created), so that log lines
/// written inside it — JSON logs in particular — carry them.
pub fn stamp(span: &tracing::Span) {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if span_context.is_valid() {
        span.record("trace_id", span_context.trace_id().to_string());
        span.record("span_id", span_context.span_id().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_opentelemetry_layer_nothing_is_propagated() {
        let span = tracing::info_span!("operation.run");
        assert_eq!(traceparent(&span), None);
        assert!(!continue_trace(
            &span,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ));
        assert!(!continue_trace(&span, "not a traceparent"));
    }
}
