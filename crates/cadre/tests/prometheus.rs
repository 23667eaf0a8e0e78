//! A real Prometheus (Debian's `prometheus`) scrapes the controller's `/metrics` over TLS
//! with the scrape configuration shipped in deploy/prometheus/, and a PromQL query over the scraped
//! series gives the allocated GPUs the API reports, in all and node by node; every series
//! the Grafana dashboard in deploy/grafana/ queries is served.
//!
//! Nothing here asserts a duration: it waits for the scraped values, within a hang guard.

use cadre_test_support::{
    Cluster, dechunk, free_port, private_tempdir, skip_unless_ci, wait_until,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const PROMETHEUS: &str = "/usr/bin/prometheus";

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// Prometheus, killed when dropped.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` on 127.0.0.1:`port`: the body.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    Some(if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    })
}

/// A query string's value, percent-encoded.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of an instant PromQL query with one result, if it has one.
fn query(port: u16, promql: &str) -> Option<f64> {
    let body = get(port, &format!("/api/v1/query?query={}", encode(promql)))?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    (result.len() == 1)
        .then(|| result[0]["value"][1].as_str()?.parse().ok())
        .flatten()
}

/// The metric names in the PromQL expressions of a Grafana dashboard.
fn dashboard_series(dashboard: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expression");
            let mut word = String::new();
            for c in expr.chars().chain([' ']) {
                if c.is_ascii_alphanumeric() || c == '_' {
                    word.push(c);
                } else {
                    if word.starts_with("slurm_") || word.starts_with("cadre_") {
                        names.insert(word.clone());
                    }
                    word.clear();
                }
            }
        }
    }
    names
}

#[test]
fn prometheus_scrapes_the_allocated_gpus_the_api_reports() {
    if !Path::new(PROMETHEUS).exists() {
        skip_unless_ci::<()>(
            "the Prometheus test",
            "Debian's prometheus is not installed",
        );
        return;
    }
    let port = free_port();
    let addr = format!("127.0.0.1:{}", free_port());
    let c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .nodes(2)
        .gpus_per_node(4)
        .args(&["--listen", &addr])
        .start();
    for gpus in ["3", "2"] {
        c.ok(&[
            "submit",
            "-n",
            "1",
            "--gpus-per-task",
            gpus,
            "-t",
            "10",
            "--",
            "sleep",
            "600",
        ]);
    }
    wait_until("both jobs run", || {
        let (_, v) = c.api("GET", "/jobs?state=RUNNING", None);
        v["jobs"].as_array().is_some_and(|j| j.len() == 2)
    });
    let (_, nodes) = c.api("GET", "/nodes", None);
    let nodes = nodes["nodes"].as_array().expect("nodes").clone();
    let total: f64 = nodes
        .iter()
        .map(|n| n["gpus_alloc"].as_f64().expect("gpus_alloc"))
        .sum();
    assert_eq!(total, 5.0, "{nodes:?}");

    // The shipped scrape configuration, aimed at this controller, with a token.
    let dir = private_tempdir();
    let token = c.ok(&["token", "create", "--user", "prometheus"]);
    let token_file = dir.path().join("cadre-token");
    std::fs::write(&token_file, token.trim()).expect("the token file");
    let config = std::fs::read_to_string(repo_file("deploy/prometheus/prometheus.yml"))
        .expect("deploy/prometheus/prometheus.yml")
        .replace("cadre-controller:8080", &addr)
        .replace(
            "/etc/prometheus/cadre-token",
            token_file.to_str().expect("utf-8"),
        )
        .replace(
            "/etc/prometheus/cadre-ca.crt",
            c.run_dir().join("ca.crt").to_str().expect("utf-8"),
        )
        .replace("15s", "1s");
    let config_file = dir.path().join("prometheus.yml");
    std::fs::write(&config_file, config).expect("the configuration");
    let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("a log");
    let prometheus = Prometheus(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("prometheus starts"),
    );
    let prometheus_log =
        || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    let deadline = std::time::Instant::now() + cadre_test_support::DEADLINE;
    while query(port, "sum(slurm_node_gpus_alloc)") != Some(total) {
        assert!(
            std::time::Instant::now() < deadline,
            "Prometheus has not scraped the allocated GPUs; its targets: {}\n{}",
            get(port, "/api/v1/targets").unwrap_or_default(),
            prometheus_log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for n in &nodes {
        let name = n["name"].as_str().expect("a name");
        let want = n["gpus_alloc"].as_f64().expect("gpus_alloc");
        let got = query(port, &format!("slurm_node_gpus_alloc{{node=\"{name}\"}}"));
        assert_eq!(got, Some(want), "node {name}\n{}", prometheus_log());
    }
    // With the token, the scrape has which job holds each GPU.
    assert_eq!(query(port, "count(cadre_gpu_job_info)"), Some(total));
    assert_eq!(query(port, "slurm_jobs_running"), Some(2.0));
    assert_eq!(query(port, "up{job=\"cadre\"}"), Some(1.0));
    drop(prometheus);

    // Every series the dashboard queries is served.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_file("deploy/grafana/cadre.json")).expect("the dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut client =
        cadre_client::Client::connect(&c.target(), None).expect("the controller's socket");
    let (status, body) = client
        .send_raw(hyper::Method::GET, "/metrics", None)
        .expect("/metrics answers");
    assert!(status.is_success(), "{status}");
    let metrics = String::from_utf8_lossy(&body).into_owned();
    let served: BTreeSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let wanted = dashboard_series(&dashboard);
    assert!(wanted.len() >= 10, "{wanted:?}");
    for name in &wanted {
        assert!(
            served.contains(name.as_str()),
            "the dashboard queries {name}, which /metrics lacks:\n{metrics}"
        );
    }
}
