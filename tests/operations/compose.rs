//! `compose.yaml` describes a runnable deployment: `docker compose config` where the plugin
//! exists; here (no plugin) a structural check of services, images or builds, ports, health checks
//! and the environment wired between them.

use serde_norway::Value;

fn get<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter()
        .fold(v, |v, k| v.get(*k).unwrap_or(&Value::Null))
}

#[test]
fn compose_file_wires_the_deployment() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("compose.yaml")).expect("compose.yaml");
    let compose: Value = serde_norway::from_str(&text).expect("valid YAML");
    let has_plugin = std::process::Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_plugin {
        let out = std::process::Command::new("docker")
            .args(["compose", "-f"])
            .arg(root.join("compose.yaml"))
            .args(["config", "-q"])
            .output()
            .expect("docker compose config");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let services = get(&compose, &["services"]).as_mapping().expect("services");
    for name in ["postgres", "workdo", "jaeger", "mailpit"] {
        let s = get(&compose, &["services", name]);
        assert!(!s.is_null(), "service {name}");
        assert!(
            get(s, &["image"]).is_string() || !get(s, &["build"]).is_null(),
            "{name} has an image or a build"
        );
        assert!(
            !get(s, &["healthcheck", "test"]).is_null(),
            "{name} has a health check"
        );
    }
    assert_eq!(services.len(), 4);
    assert!(
        root.join(
            get(&compose, &["services", "workdo", "build"])
                .as_str()
                .expect("build")
        )
        .join("Dockerfile")
        .is_file()
    );
    let env = |k: &str| {
        get(&compose, &["services", "workdo", "environment", k])
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(
        env("DATABASE_URL").contains("@postgres:5432/"),
        "database wired to the postgres service"
    );
    assert!(env("OTEL_EXPORTER_OTLP_ENDPOINT").starts_with("http://jaeger:4317"));
    assert_eq!(env("OTEL_EXPORTER_OTLP_PROTOCOL"), "grpc");
    assert_eq!(env("WORKDO_SMTP_URL"), "smtp://mailpit:1025");
    assert!(!env("WORKDO_ALERT_TO").is_empty());
    let command = format!("{:?}", get(&compose, &["services", "workdo", "command"]));
    assert!(
        command.contains("workdo migrate") && command.contains("workdo up --listen 0.0.0.0:7070"),
        "{command}"
    );
    let ports = |s: &str| format!("{:?}", get(&compose, &["services", s, "ports"]));
    assert!(ports("workdo").contains("7070:7070"));
    assert!(ports("jaeger").contains("16686:16686") && ports("jaeger").contains("4317:4317"));
    assert!(ports("mailpit").contains("8025:8025"));
    for dep in ["postgres", "jaeger", "mailpit"] {
        assert_eq!(
            get(
                &compose,
                &["services", "workdo", "depends_on", dep, "condition"]
            )
            .as_str(),
            Some("service_healthy"),
            "workdo waits for {dep}"
        );
    }
}
