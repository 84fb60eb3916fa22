//! Traces and metrics over OTLP to a real receiver on loopback (axum decoding OTLP/HTTP
//! protobuf with the opentelemetry-proto types), from real `workdo` processes.

mod support;

use sqlx::PgPool;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;
use support::{db, load};

#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attrs: HashMap<String, String>,
    service: String,
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// metric name → (attributes, value): sums and histogram counts
    metrics: Vec<(String, HashMap<String, String>, f64)>,
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

fn attrs(kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

/// An OTLP/HTTP receiver on a free loopback port.
async fn receiver() -> (String, Arc<Mutex<Received>>) {
    let got: Arc<Mutex<Received>> = Arc::default();
    let (g1, g2) = (Arc::clone(&got), Arc::clone(&got));
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(move |body: Bytes| {
                let got = Arc::clone(&g1);
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("OTLP traces");
                    let mut g = got.lock().expect("lock");
                    for rs in req.resource_spans {
                        let service = rs.resource.as_ref().map(|r| attrs(&r.attributes)).unwrap_or_default();
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                g.spans.push(Span {
                                    name: s.name,
                                    trace: hex(&s.trace_id),
                                    id: hex(&s.span_id),
                                    parent: hex(&s.parent_span_id),
                                    attrs: attrs(&s.attributes),
                                    service: service.get("service.name").cloned().unwrap_or_default(),
                                });
                            }
                        }
                    }
                    ""
                }
            }),
        )
        .route(
            "/v1/metrics",
            post(move |body: Bytes| {
                let got = Arc::clone(&g2);
                async move {
                    let req = ExportMetricsServiceRequest::decode(body).expect("OTLP metrics");
                    let mut g = got.lock().expect("lock");
                    for rm in req.resource_metrics {
                        for sm in rm.scope_metrics {
                            for m in sm.metrics {
                                match m.data {
                                    Some(Data::Sum(s)) => {
                                        for p in s.data_points {
                                            let v = match p.value {
                                                Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(i)) => i as f64,
                                                Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(d)) => d,
                                                None => 0.0,
                                            };
                                            g.metrics.push((m.name.clone(), attrs(&p.attributes), v));
                                        }
                                    }
                                    Some(Data::Histogram(h)) => {
                                        for p in h.data_points {
                                            g.metrics.push((m.name.clone(), attrs(&p.attributes), p.count as f64));
                                        }
                                    }
                                    _ => g.metrics.push((m.name.clone(), HashMap::new(), 0.0)),
                                }
                            }
                        }
                    }
                    ""
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn workdo(db_url: &str, otlp: &str) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"));
    c.env("DATABASE_URL", db_url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_SERVICE_NAME", "workdo-test")
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

async fn wait_sql(pool: &PgPool, sql: &'static str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let done: bool = sqlx::query_scalar(sql)
            .fetch_one(pool)
            .await
            .expect("query");
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {sql}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A child process killed if the test fails before stopping it.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn terminate(child: &mut std::process::Child) {
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    let status = child.wait().expect("wait");
    assert!(status.success(), "workdo exited with {status}");
}

const WARM: &str = r#"import json, os, sys, time
for line in sys.stdin:
    e = json.loads(line)
    start = time.time_ns()
    time.sleep(0.01)
    print(json.dumps({"call": e["call"], "status": "completed", "note": e.get("traceparent") or "",
                      "spans": [{"name": "warm-work", "start_unix_nano": start, "end_unix_nano": time.time_ns(),
                                 "attributes": {"pages": "3"}}]}), flush=True)
"#;

const HTTP: &str = r#"import http.server, json, time
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        e = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        start = time.time_ns()
        body = json.dumps({"status": "completed", "note": self.headers.get("traceparent", ""),
                           "spans": [{"name": "http-work", "start_unix_nano": start, "end_unix_nano": time.time_ns()}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_workflow_with_steps_invocations_and_function_spans() {
    let t = db().await;
    let (otlp, got) = receiver().await;
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("warm.py"), WARM).expect("warm");
    std::fs::write(dir.path().join("fn_http.py"), HTTP).expect("http");
    let mut server = KillOnDrop(Some(
        std::process::Command::new("python3")
            .arg(dir.path().join("fn_http.py"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python"),
    ));
    let stdout = server
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .expect("stdout");
    let mut port = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut port).expect("port");
    load(
        &t.store,
        "two.yaml",
        &format!(
            "name: twoWF\nsteps:\n  - name: a\n    function: {{ warm: python3 {}, timeout: 10s }}\n  - name: b\n    prereqs: [a]\n    function: {{ http: 'http://127.0.0.1:{}/', timeout: 10s }}\n",
            dir.path().join("warm.py").display(),
            port.trim()
        ),
    )
    .await;
    // The workflow starts in one process, its steps run in another.
    let mut start = workdo(&t.url, &otlp);
    start.args(["start", "twoWF", "druid:bb123cd4567", "--lane", "fast"]);
    // Blocking waits run off the runtime: the receiver must keep answering the exporter.
    let out = tokio::task::spawn_blocking(move || start.output())
        .await
        .expect("join")
        .expect("start");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let up = workdo(&t.url, &otlp)
        .args(["up", "--no-api", "--poll-interval", "200ms"])
        .spawn()
        .expect("up");
    let mut up = KillOnDrop(Some(up));
    wait_sql(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        60,
    )
    .await;
    let mut child = up.0.take().expect("child");
    tokio::task::spawn_blocking(move || terminate(&mut child))
        .await
        .expect("join");
    drop(server);

    let stored: String = sqlx::query_scalar("select trace_context from workdo.workflows")
        .fetch_one(t.pool())
        .await
        .expect("trace");
    // Take what arrived: nothing more comes, the processes have exited.
    let got = std::mem::take(&mut *got.lock().expect("lock"));
    let by_name =
        |n: &str| -> Vec<Span> { got.spans.iter().filter(|s| s.name == n).cloned().collect() };
    let root = by_name("workflow twoWF");
    assert_eq!(
        root.len(),
        1,
        "one workflow span: {:?}",
        got.spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = &root[0];
    assert_eq!(root.parent, "", "the workflow span is a root");
    assert_eq!(root.service, "workdo-test");
    assert_eq!(
        stored,
        format!("00-{}-{}-01", root.trace, root.id),
        "the row keeps the workflow's trace context"
    );
    assert_eq!(
        root.attrs.get("workdo.object_id").map(String::as_str),
        Some("druid:bb123cd4567")
    );
    for (step, function_span) in [("a", "warm-work"), ("b", "http-work")] {
        let s = by_name(&format!("step twoWF:{step}"));
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!(
            (s.trace.as_str(), s.parent.as_str()),
            (root.trace.as_str(), root.id.as_str()),
            "step {step} under the workflow"
        );
        for (k, v) in [
            ("workdo.object_id", "druid:bb123cd4567"),
            ("workdo.template", "twoWF"),
            ("workdo.step", step),
            ("workdo.attempt", "1"),
            ("workdo.lane", "fast"),
            ("workdo.status", "completed"),
        ] {
            assert_eq!(
                s.attrs.get(k).map(String::as_str),
                Some(v),
                "{k} on step {step}: {:?}",
                s.attrs
            );
        }
        let inv = by_name(&format!("invoke {step}"));
        assert_eq!(inv.len(), 1);
        assert_eq!(
            (inv[0].trace.as_str(), inv[0].parent.as_str()),
            (root.trace.as_str(), s.id.as_str())
        );
        let f = by_name(function_span);
        assert_eq!(f.len(), 1, "the function's own span");
        assert_eq!(
            (f[0].trace.as_str(), f[0].parent.as_str()),
            (root.trace.as_str(), inv[0].id.as_str())
        );
        // The function was handed the invocation's context.
        let note: String = sqlx::query_scalar("select note from workdo.steps where name = $1")
            .bind(step)
            .fetch_one(t.pool())
            .await
            .expect("note");
        assert_eq!(note, format!("00-{}-{}-01", root.trace, inv[0].id));
    }
    assert_eq!(
        by_name("warm-work")[0]
            .attrs
            .get("pages")
            .map(String::as_str),
        Some("3")
    );
    assert!(
        got.spans.iter().any(|s| s.name.starts_with("claim twoWF:")),
        "claim spans"
    );
    assert!(got.spans.iter().any(|s| s.name == "commit"), "commit spans");
    // Metrics arrive with their names and values.
    let metric = |name: &str, step: &str| -> f64 {
        got.metrics
            .iter()
            .filter(|(n, a, _)| n == name && a.get("step").map(String::as_str) == Some(step))
            .map(|(_, _, v)| *v)
            .fold(0.0, f64::max)
    };
    assert_eq!(metric("workdo.steps.completed", "a"), 1.0);
    assert_eq!(metric("workdo.steps.completed", "b"), 1.0);
    assert_eq!(
        metric("workdo.invocation.duration", "a"),
        1.0,
        "one invocation recorded"
    );
    assert!(
        got.metrics
            .iter()
            .any(|(n, _, _)| n == "workdo.claim.duration")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_sends_one_trace_per_workflow_with_function_spans_nested() {
    let t = db().await;
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_workdo"))
        .parent()
        .map(PathBuf::from)
        .expect("dir");
    assert!(
        bin_dir.join("process-content").is_file(),
        "the demo function binaries are missing next to {}: run `cargo test --workspace` (or `cargo build --workspace`)",
        bin_dir.display()
    );
    let (otlp, got) = receiver().await;
    let data = tempfile::tempdir().expect("dir");
    let mut demo = workdo(&t.url, &otlp);
    demo.args(["up", "--demo", "5", "--workspace"])
        .arg(data.path());
    let out = tokio::task::spawn_blocking(move || demo.output())
        .await
        .expect("join")
        .expect("demo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Take what arrived: nothing more comes, the processes have exited.
    let got = std::mem::take(&mut *got.lock().expect("lock"));
    let roots: Vec<&Span> = got
        .spans
        .iter()
        .filter(|s| s.name.starts_with("workflow "))
        .collect();
    let workflows: i64 = sqlx::query_scalar("select count(*) from workdo.workflows")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(
        roots.len() as i64,
        workflows,
        "one trace per workflow (googleScannedBookWF and the accessionWF it starts)"
    );
    let traces: std::collections::HashSet<&str> = roots.iter().map(|r| r.trace.as_str()).collect();
    assert_eq!(traces.len(), roots.len());
    // Every step span hangs under its workflow's root; every checksum span under an invocation.
    for s in got.spans.iter().filter(|s| s.name.starts_with("step ")) {
        assert!(
            roots.iter().any(|r| r.trace == s.trace && r.id == s.parent),
            "orphan step span {}",
            s.name
        );
    }
    let checksums: Vec<&Span> = got.spans.iter().filter(|s| s.name == "checksum").collect();
    assert!(
        !checksums.is_empty(),
        "process-content reports its checksum spans"
    );
    for c in checksums {
        let parent = got.spans.iter().find(|s| s.id == c.parent).expect("parent");
        assert_eq!(parent.name, "invoke process-content");
    }
    // The span tree of one object, for people reading the test output.
    let object = roots[0]
        .attrs
        .get("workdo.object_id")
        .cloned()
        .unwrap_or_default();
    let mut tree = String::new();
    for r in roots
        .iter()
        .filter(|r| r.attrs.get("workdo.object_id") == Some(&object))
    {
        print_tree(&got.spans, r, 0, &mut tree);
    }
    println!("{tree}");
}

fn print_tree(all: &[Span], node: &Span, depth: usize, out: &mut String) {
    let status = node
        .attrs
        .get("workdo.status")
        .map(|s| format!(" [{s}]"))
        .unwrap_or_default();
    out.push_str(&format!("{}{}{}\n", "  ".repeat(depth), node.name, status));
    let mut children: Vec<&Span> = all
        .iter()
        .filter(|s| s.parent == node.id && s.trace == node.trace)
        .collect();
    children.sort_by(|a, b| a.name.cmp(&b.name));
    for c in children {
        print_tree(all, c, depth + 1, out);
    }
}

/// An OTLP/gRPC trace receiver (the collector's own service definition, served by tonic).
struct GrpcSink(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService
    for GrpcSink
{
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
        >,
        tonic::Status,
    > {
        let mut got = self.0.lock().expect("lock");
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                for s in ss.spans {
                    got.push(Span {
                        name: s.name,
                        trace: hex(&s.trace_id),
                        id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        attrs: attrs(&s.attributes),
                        service: String::new(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(Default::default()))
    }
}

/// Accepts OTLP metrics over gRPC (and drops them): the exporter needs a peer that answers.
struct GrpcMetricsSink;

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsService
    for GrpcMetricsSink
{
    async fn export(
        &self,
        _request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse,
        >,
        tonic::Status,
    > {
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_builds_the_same_trace() {
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsServiceServer;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
    let t = db().await;
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let sink = GrpcSink(Arc::clone(&spans));
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(sink))
            .add_service(MetricsServiceServer::new(GrpcMetricsSink))
            .serve(addr)
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "gRPC receiver did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    load(
        &t.store,
        "g.yaml",
        "name: grpcWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let grpc = |args: &[&str]| {
        let mut c = workdo(&t.url, &endpoint);
        c.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc").args(args);
        c
    };
    let mut start = grpc(&["start", "grpcWF", "druid:bb123cd4567"]);
    let out = tokio::task::spawn_blocking(move || start.output())
        .await
        .expect("join")
        .expect("start");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let up = grpc(&["up", "--no-api", "--poll-interval", "200ms"])
        .spawn()
        .expect("up");
    let mut up = KillOnDrop(Some(up));
    wait_sql(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        60,
    )
    .await;
    let mut child = up.0.take().expect("child");
    tokio::task::spawn_blocking(move || terminate(&mut child))
        .await
        .expect("join");
    let got = std::mem::take(&mut *spans.lock().expect("lock"));
    let root = got
        .iter()
        .find(|s| s.name == "workflow grpcWF")
        .expect("workflow span over gRPC");
    let step = got
        .iter()
        .find(|s| s.name == "step grpcWF:a")
        .expect("step span over gRPC");
    assert_eq!(
        (step.trace.as_str(), step.parent.as_str()),
        (root.trace.as_str(), root.id.as_str())
    );
    assert_eq!(
        step.attrs.get("workdo.status").map(String::as_str),
        Some("completed")
    );
}
