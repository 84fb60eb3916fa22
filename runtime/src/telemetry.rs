//! Logs, traces and metrics.
//!
//! `tracing` logs go to stderr, as text or one JSON object per line ([`LogOptions`]; by default
//! workdo's own events at `info`, everything else at `warn`). When
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, spans and
//! metrics are also exported over OTLP, `grpc` or `http/protobuf` as `OTEL_EXPORTER_OTLP_PROTOCOL`
//! says (default `http/protobuf`), with `OTEL_SERVICE_NAME` (default `workdo`) and the other
//! standard variables. Unset, nothing is exported and nothing costs more than a disabled span.
//!
//! One trace per workflow: starting a workflow creates a root span whose W3C `traceparent` is
//! stored on the workflow row; every step's span is a child of it, in whichever process and
//! however much later the step runs. Functions get the invocation span's `traceparent` and may
//! report their own spans in their result, which become children of the invocation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::trace::{Span as _, TraceContextExt, Tracer as _};
use opentelemetry::{KeyValue, global};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?}: use grpc or http/protobuf")]
    Protocol(String),
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(String),
    #[error(
        "--log-level {0:?}: {1} (use error, warn, info, debug or trace, or directives such as workdo=debug,sqlx=info)"
    )]
    Filter(String, String),
    #[error("--log-format {0:?}: use text or json")]
    Format(String),
}

/// What is logged to stderr, and how.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A level (`info`: workdo's events at that level, other crates' at `warn`) or
    /// `tracing` directives (`workdo=debug,sqlx=info`), taken as they are.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            level: "info".into(),
            format: "text".into(),
        }
    }
}

impl LogOptions {
    fn filter(&self) -> Result<EnvFilter, TelemetryError> {
        let level = self.level.trim();
        let directives = if ["error", "warn", "info", "debug", "trace", "off"]
            .contains(&level.to_ascii_lowercase().as_str())
        {
            let level = level.to_ascii_lowercase();
            // Other crates' chatter stays at warn unless asked for by name.
            if level == "off" || level == "error" {
                level
            } else {
                format!("warn,workdo={level}")
            }
        } else {
            level.to_string()
        };
        EnvFilter::builder()
            .parse(&directives)
            .map_err(|e| TelemetryError::Filter(self.level.clone(), e.to_string()))
    }
}

/// Keeps the exporters; [`Telemetry::shutdown`] flushes them.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

static ENABLED: OnceLock<bool> = OnceLock::new();

/// Whether spans are exported.
pub fn enabled() -> bool {
    ENABLED.get().copied().unwrap_or(false)
}

fn configured() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

fn resource() -> opentelemetry_sdk::Resource {
    let b = opentelemetry_sdk::Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty()) {
        b.build()
    } else {
        b.with_service_name("workdo").build()
    }
}

/// Install the global subscriber (and exporters when configured). Call once, inside the tokio
/// runtime.
///
/// # Errors
/// A log level or format that cannot be parsed, an unsupported protocol, or an exporter that
/// cannot be built.
pub fn init(logs: &LogOptions) -> Result<Telemetry, TelemetryError> {
    // Concrete layers (one of them `None`), not a boxed one: the OTLP layer's own filter must
    // stay independent of the log filter.
    let filter = logs.filter()?;
    // Colour only for a terminal: a log written to a file or a collector gets no escape codes.
    let base = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let (text, json) = match logs.format.as_str() {
        "text" => (Some(base.with_filter(filter)), None),
        "json" => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_filter(filter),
            ),
        ),
        other => return Err(TelemetryError::Format(other.to_string())),
    };
    if !configured() {
        let _ = ENABLED.set(false);
        let _ = tracing_subscriber::registry()
            .with(text)
            .with(json)
            .try_init();
        return Ok(Telemetry {
            tracer: None,
            meter: None,
        });
    }
    crate::install_crypto();
    global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let protocol =
        std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_or_else(|_| "http/protobuf".into());
    let err = |e: opentelemetry_otlp::ExporterBuildError| TelemetryError::Exporter(e.to_string());
    use opentelemetry_otlp::{MetricExporter, SpanExporter};
    let (spans, metrics) = match protocol.as_str() {
        "grpc" => (
            SpanExporter::builder().with_tonic().build().map_err(err)?,
            MetricExporter::builder()
                .with_tonic()
                .build()
                .map_err(err)?,
        ),
        "http/protobuf" => (
            SpanExporter::builder().with_http().build().map_err(err)?,
            MetricExporter::builder().with_http().build().map_err(err)?,
        ),
        other => return Err(TelemetryError::Protocol(other.to_string())),
    };
    let tracer_provider = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_resource(resource())
        .build();
    let meter_provider = SdkMeterProvider::builder()
        .with_periodic_exporter(metrics)
        .with_resource(resource())
        .build();
    global::set_tracer_provider(tracer_provider.clone());
    global::set_meter_provider(meter_provider.clone());
    use opentelemetry::trace::TracerProvider as _;
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer_provider.tracer("workdo"))
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target("workdo", tracing::Level::INFO),
        );
    let _ = ENABLED.set(true);
    let _ = tracing_subscriber::registry()
        .with(text)
        .with(json)
        .with(otel)
        .try_init();
    Ok(Telemetry {
        tracer: Some(tracer_provider),
        meter: Some(meter_provider),
    })
}

impl Telemetry {
    /// Export everything buffered and stop the exporters.
    pub async fn shutdown(self) {
        let Telemetry { tracer, meter } = self;
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(t) = tracer {
                let _ = t.force_flush();
                let _ = t.shutdown();
            }
            if let Some(m) = meter {
                let _ = m.force_flush();
                let _ = m.shutdown();
            }
        })
        .await;
    }
}

/// The W3C `traceparent` of a span, if it is being exported.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// Make `span` a child of the span a `traceparent` names.
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::propagation::TextMapPropagator as _;
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(cx);
}

/// A new trace for a workflow: a root span, ended at once, whose `traceparent` the workflow
/// keeps. `None` when nothing is exported.
pub fn workflow_trace(object: &str, template: &str, version: i32, lane: &str) -> Option<String> {
    if !enabled() {
        return None;
    }
    let span = tracing::info_span!(
        target: "workdo::workflow",
        "workflow",
        otel.name = %format!("workflow {template}"),
        workdo.object_id = %object,
        workdo.template = %template,
        workdo.version = version,
        workdo.lane = %lane,
    );
    let _ = span.set_parent(opentelemetry::Context::new());
    traceparent(&span)
}

/// Spans a function reported in its result, as children of `parent`.
pub fn function_spans(parent: &tracing::Span, spans: &[workdo_function::protocol::FunctionSpan]) {
    if !enabled() || spans.is_empty() {
        return;
    }
    let tracer = global::tracer("workdo-function");
    let cx = parent.context();
    for s in spans {
        let at = |n: u64| UNIX_EPOCH + Duration::from_nanos(n);
        let attrs: Vec<KeyValue> = s
            .attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        let mut span = tracer
            .span_builder(s.name.clone())
            .with_start_time(at(s.start_unix_nano))
            .with_attributes(attrs)
            .start_with_context(&tracer, &cx);
        span.end_with_timestamp(at(s.end_unix_nano.max(s.start_unix_nano)));
    }
}

/// (template, step, lane) → (ready steps, age in seconds of the oldest), read by the gauges.
pub type QueueGauges = Arc<Mutex<HashMap<(String, String, String), (u64, f64)>>>;

/// The runtime's metrics, on the global meter (a no-op meter when nothing is exported).
pub struct Metrics {
    pub completed: Counter<u64>,
    pub failed: Counter<u64>,
    pub retried: Counter<u64>,
    pub invocation: Histogram<f64>,
    pub claim: Histogram<f64>,
    /// (template, step, lane) → (depth, oldest ready age in seconds), refreshed by the runtime.
    pub queues: QueueGauges,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The metrics, created on first use.
pub fn metrics() -> &'static Metrics {
    METRICS.get_or_init(|| {
        let meter = global::meter("workdo");
        let queues: QueueGauges = Arc::default();
        let gauge = |q: &QueueGauges, age: bool| {
            let q = Arc::clone(q);
            move |o: &dyn opentelemetry::metrics::AsyncInstrument<f64>| {
                if let Ok(map) = q.lock() {
                    for ((t, s, l), (depth, oldest)) in map.iter() {
                        let value = if age { *oldest } else { *depth as f64 };
                        o.observe(
                            value,
                            &[
                                KeyValue::new("template", t.clone()),
                                KeyValue::new("step", s.clone()),
                                KeyValue::new("lane", l.clone()),
                            ],
                        );
                    }
                }
            }
        };
        let _depth = meter
            .f64_observable_gauge("workdo.queue.depth")
            .with_description("Ready steps per template step and lane")
            .with_callback(gauge(&queues, false))
            .build();
        let _age = meter
            .f64_observable_gauge("workdo.queue.oldest_ready_age")
            .with_unit("s")
            .with_description("Age of the oldest ready step per template step and lane")
            .with_callback(gauge(&queues, true))
            .build();
        Metrics {
            completed: meter
                .u64_counter("workdo.steps.completed")
                .with_description("Steps completed")
                .build(),
            failed: meter
                .u64_counter("workdo.steps.failed")
                .with_description("Steps that ended in error")
                .build(),
            retried: meter
                .u64_counter("workdo.steps.retried")
                .with_description("Failed attempts that will be retried")
                .build(),
            invocation: meter
                .f64_histogram("workdo.invocation.duration")
                .with_unit("s")
                .with_description("Function call time")
                .build(),
            claim: meter
                .f64_histogram("workdo.claim.duration")
                .with_unit("s")
                .with_description("Time of one claim statement")
                .build(),
            queues,
        }
    })
}
