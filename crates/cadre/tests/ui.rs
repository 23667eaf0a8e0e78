//! The web dashboard in a real browser (Debian's headless chromium, driven through
//! chromedriver) against `cadre up --listen`: logins (a token typed in; a `cadre ui`
//! link, good once), the cluster page's GPU cells against the API's allocation, the queue
//! page's reason and why-not, a user's cancel of their own job and the refusals on another
//! user's, an administrator's drain, and a live update reaching an open page.
//!
//! Screenshots of each page are written under the target directory
//! (`target/tmp/ui-screenshots/`); docs/ui/ keeps the current ones.
//!
//! The jobs run as real local users (`nobody`, `daemon`): the test needs root, as CI has.
//! Nothing here asserts a duration: it waits for states, within a hang guard.

use cadre_test_support::browser::{Browser, chromium_paths};
use cadre_test_support::{Cluster, skip_unless_ci, text, wait_until};
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots")
}

fn free_addr() -> String {
    format!("127.0.0.1:{}", cadre_test_support::free_port())
}

/// `cadre token create --user USER`: the secret.
fn token_for(c: &Cluster, user: &str) -> String {
    let t: Value = serde_json::from_str(&c.ok(&["token", "create", "--user", user, "--json"]))
        .expect("token JSON");
    t["token"].as_str().expect("the secret").to_owned()
}

/// The browser's session cookie, as a `Cookie` header's value, and as the browser holds it.
fn session_cookie(b: &Browser) -> (String, Value) {
    let record = b
        .cookies()
        .into_iter()
        .find(|k| k["name"] == "cadre_session")
        .expect("a session cookie");
    let value = record["value"].as_str().expect("a value");
    (format!("cadre_session={value}"), record)
}

/// The CSRF token of the session whose cookie is `cookie` (`GET /ui/session`).
fn csrf_of(addr: &str, cookie: &str) -> String {
    let (status, session) = http(addr, "GET", "/ui/session", &[("Cookie", cookie)], "");
    assert_eq!(status, 200, "{session}");
    session
        .split("\"csrf\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF token")
        .to_owned()
}

/// `GET /ui/live` on TCP with `credential` (a header line), its status line read: the
/// open stream.
fn live_stream(addr: &str, credential: &str) -> std::net::TcpStream {
    let mut live = std::net::TcpStream::connect(addr).expect("the controller listens");
    live.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("a read timeout");
    write!(
        live,
        "GET /ui/live HTTP/1.1\r\nHost: {addr}\r\n{credential}\r\nConnection: close\r\n\r\n"
    )
    .expect("request sent");
    let mut head = [0u8; 12];
    live.read_exact(&mut head).expect("the stream's status");
    assert_eq!(&head, b"HTTP/1.1 200", "the live stream opens");
    live
}

/// Reads `live` to its end, which must come within 30 s: keep-alives come every 15 s, so
/// the stream must end, not merely fall silent.
fn assert_ends(mut live: std::net::TcpStream, what: &str) {
    live.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("a read timeout");
    let since = std::time::Instant::now();
    let mut chunk = [0u8; 4096];
    loop {
        match live.read(&mut chunk) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the live stream: {e}"),
        }
        assert!(since.elapsed() < Duration::from_secs(30), "{what}");
    }
}

/// `cadre submit ARGS` over TCP with `token`, output to /dev/null: the job id.
fn submit_as(c: &Cluster, addr: &str, token: &str, args: &[&str]) -> u64 {
    submit_to(c, addr, token, "/dev/null", args)
}

/// `cadre submit --output OUTPUT ARGS` over TCP with `token`: the job id.
fn submit_to(c: &Cluster, addr: &str, token: &str, output: &str, args: &[&str]) -> u64 {
    let server = format!("http://{addr}");
    let base = [
        "submit",
        "--server",
        &server,
        "--token",
        token,
        "--parsable",
        "--chdir",
        "/tmp",
        "--output",
        output,
    ];
    let out = c.run(&[&base[..], args].concat());
    assert!(
        out.status.success(),
        "submit {args:?}: {}{}",
        text(&out.stderr),
        c.log()
    );
    text(&out.stdout).trim().parse().expect("a job id")
}

/// One HTTP/1.1 exchange on TCP with extra headers: the status and the body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("the controller listens");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("request sent");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("answer read");
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status: {raw:?}"));
    (status, raw)
}

fn job(c: &Cluster, id: u64) -> Value {
    let (status, v) = c.api("GET", &format!("/jobs/{id}"), None);
    assert_eq!(status, 200, "{v}");
    v
}

/// The node and GPU positions of every task of a job, by node name.
fn placement(c: &Cluster, id: u64) -> Vec<(String, u64)> {
    let (_, nodes) = c.api("GET", "/nodes", None);
    let names: Vec<&str> = nodes["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["name"].as_str().expect("a name"))
        .collect();
    let j = job(c, id);
    let mut out = Vec::new();
    for t in j["allocation"]["tasks"].as_array().expect("an allocation") {
        let node = names[t["node"].as_u64().expect("node id") as usize];
        for g in t["gpus"].as_array().expect("gpus") {
            out.push((node.to_owned(), g.as_u64().expect("a GPU")));
        }
    }
    out
}

#[test]
fn the_dashboard_in_a_real_browser() {
    let Some((chromium, driver)) = chromium_paths().or_else(|| {
        skip_unless_ci(
            "the dashboard's browser tests",
            "Debian's chromium and chromium-driver are not installed",
        )
    }) else {
        return;
    };
    if !nix::unistd::geteuid().is_root() {
        skip_unless_ci::<()>(
            "the dashboard's browser tests",
            "they run jobs as other users, which needs root",
        );
        return;
    }
    let addr = free_addr();
    let c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .nodes(2)
        .gpus_per_node(4)
        // Plain TCP: the test's own requests by hand (cookies, CSRF) are plain HTTP/1.1.
        .args(&["--listen", &addr, "--insecure"])
        .start();
    let base = format!("http://{addr}");
    let nobody = token_for(&c, "nobody");
    let daemon = token_for(&c, "daemon");
    // nobody's gang: 2 nodes x 2 GPUs, running, each rank printing a tick a second into a
    // file of its own in a directory of nobody's; then a job that cannot fit beside it.
    let out_dir = tempfile::Builder::new()
        .prefix("cadre-ui-output")
        .tempdir_in("/tmp")
        .expect("a directory for the gang's output");
    nix::unistd::chown(
        out_dir.path(),
        Some(nix::unistd::Uid::from_raw(65534)),
        None,
    )
    .expect("chown to nobody");
    let pattern = out_dir.path().join("rank-%t.out");
    let gang = submit_to(
        &c,
        &addr,
        &nobody,
        pattern.to_str().expect("a UTF-8 path"),
        &[
            "-N",
            "2",
            "--ntasks-per-node",
            "1",
            "--gpus-per-task",
            "2",
            "-t",
            "1:00:00",
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 600 ]; do echo \"rank $SLURM_PROCID tick $i\"; i=$((i+1)); sleep 1; done",
        ],
    );
    let waiting = submit_as(
        &c,
        &addr,
        &nobody,
        &[
            "-N",
            "2",
            "--ntasks-per-node",
            "1",
            "--gpus-per-task",
            "4",
            "-t",
            "30",
            "--",
            "sleep",
            "600",
        ],
    );
    // Another user's job, held.
    let others = submit_as(&c, &addr, &daemon, &["--hold", "--", "sleep", "600"]);
    wait_until("the gang runs", || job(&c, gang)["state"] == "RUNNING");
    wait_until("the big job waits for resources", || {
        job(&c, waiting)["reason"] == "Resources"
    });
    let shots = screenshots();

    // --- a user, logged in with a token ---------------------------------------------------
    let b = Browser::start(&chromium, &driver);
    b.goto(&format!("{base}/ui/"));
    b.wait_for("#login #token", "the login form");
    b.screenshot(&shots.join("login.png"));
    b.type_into("#token", "cadre_not-a-token");
    b.click("#login button");
    b.wait_text("#toast", "a refused login", |t| t.contains("not valid"));
    b.execute(
        "document.getElementById('token').value = '';",
        Value::Array(vec![]),
    );
    b.type_into("#token", &nobody);
    b.click("#login button");
    b.wait_text("#who", "the user's name", |t| t == "nobody");
    let (cookie, record) = session_cookie(&b);
    assert_eq!(record["httpOnly"], true, "{record}");
    assert_eq!(record["sameSite"], "Strict", "{record}");
    assert!(!b.url().contains(&nobody), "the token is in no URL");

    // Cluster: every GPU of the gang's placement is a cell of the gang, on its node, and
    // no other cell is.
    let placed = placement(&c, gang);
    assert_eq!(placed.len(), 4, "{placed:?}");
    b.wait_for("li[data-node] span.gpu", "the GPU cells");
    for (node, gpu) in &placed {
        let css = format!("li[data-node='{node}'] span.gpu[data-gpu='{gpu}']");
        assert_eq!(
            b.attr(&css, "data-job").as_deref(),
            Some(gang.to_string().as_str()),
            "{css}"
        );
        let label = b.attr(&css, "aria-label").unwrap_or_default();
        assert!(label.contains(&format!("job {gang} of nobody")), "{label}");
    }
    let cells = b.find_all(&format!("span.gpu[data-job='{gang}']"));
    assert_eq!(cells.len(), placed.len(), "the gang's cells");
    assert_eq!(b.find_all("span.gpu").len(), 8, "every GPU is a cell");
    b.screenshot(&shots.join("cluster.png"));
    // A user may not drain: the node's details have no drain button.
    b.click("li[data-node='node001'] .node-name");
    b.wait_for("#node-detail", "the node's details");
    assert!(b.find("#drain").is_none(), "a user is offered a drain");

    // Live: a job started by someone else appears on the open page, without a reload.
    b.execute("window.cadreMarker = 1;", Value::Array(vec![]));
    let live = submit_as(
        &c,
        &addr,
        &daemon,
        &[
            "-n",
            "1",
            "--gpus-per-task",
            "1",
            "-t",
            "10",
            "--",
            "sleep",
            "600",
        ],
    );
    b.wait_for(
        &format!("span.gpu[data-job='{live}']"),
        "the new job's GPU on the open page",
    );
    assert_eq!(
        b.execute("return window.cadreMarker;", Value::Array(vec![])),
        1,
        "the page was reloaded"
    );

    // Queue: the waiting job with its reason, and its why-not.
    b.goto(&format!("{base}/ui/#/queue"));
    let row = format!("#pending tr[data-job='{waiting}']");
    b.wait_text(
        &format!("{row} td.reason"),
        "the pending job's reason",
        |t| t == "Resources",
    );
    b.click(&format!("{row} .why-button"));
    let why = b.wait_text(&format!("#why-{waiting}"), "the why-not", |t| {
        t.contains("node001") && t.contains("node002")
    });
    assert!(why.contains("Reason Resources"), "{why}");
    b.wait_for(
        &format!("#running tr[data-job='{gang}'] progress"),
        "the gang's elapsed time",
    );
    b.screenshot(&shots.join("queue.png"));

    // Job: the gang's placement, rank by rank.
    b.goto(&format!("{base}/ui/#/job/{gang}"));
    b.wait_text("#job-state", "the gang's state", |t| t == "RUNNING");
    let nodes = b.texts("#placement td.rank-node");
    let mut want: Vec<String> = placed.iter().map(|(n, _)| n.clone()).collect();
    want.dedup();
    assert_eq!(nodes, want, "ranks to nodes");
    b.wait_text("#events", "the gang's events", |t| t.contains("Submitted"));
    b.wait_text("#h-steps", "the gang's steps", |t| t.starts_with("Steps"));
    // A rank's output, followed while it runs: rank 0's first, then rank 1's, chosen; the
    // page keeps reading as the rank prints.
    b.wait_text("#output", "rank 0's output", |t| {
        t.contains("rank 0 tick 1")
    });
    b.execute(
        "const s = document.getElementById('output-task'); s.value = '1'; s.dispatchEvent(new Event('change'));",
        Value::Array(vec![]),
    );
    let first = b.wait_text("#output", "rank 1's output", |t| t.contains("rank 1 tick"));
    assert!(
        !first.contains("rank 0"),
        "rank 0's output under rank 1: {first}"
    );
    let ticks = |t: &str| t.lines().filter(|l| l.starts_with("rank 1 tick")).count();
    let seen = ticks(&first);
    b.wait_text("#output", "rank 1's output growing", |t| {
        ticks(t) >= seen + 2
    });
    b.wait_text("#output-status", "the rank followed", |t| {
        t.starts_with("Running, following") && t.contains(&format!(" on {}", nodes[1]))
    });
    // Over the API with the user's token: another user's job's output is refused, and so
    // is a read larger than the agent serves.
    let bearer = format!("Bearer {nobody}");
    let auth = [("Authorization", bearer.as_str())];
    let (status, body) = http(
        &addr,
        "GET",
        &format!("/api/v1/jobs/{others}/output"),
        &auth,
        "",
    );
    assert_eq!(status, 403, "{body}");
    let (status, body) = http(
        &addr,
        "GET",
        &format!("/api/v1/jobs/{gang}/output?task=1&limit=1000000000"),
        &auth,
        "",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("limit=1000000000"), "{body}");
    let (status, body) = http(
        &addr,
        "GET",
        &format!("/api/v1/jobs/{gang}/output?task=2"),
        &auth,
        "",
    );
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("tasks 0 to 1"), "{body}");
    let (status, body) = http(
        &addr,
        "GET",
        &format!("/api/v1/jobs/{gang}/output?task=1&offset=0&limit=12"),
        &auth,
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"data\":\"rank 1 tick \""), "{body}");
    b.screenshot(&shots.join("job.png"));

    // Accounts: the fair-share tree has the user's association.
    b.goto(&format!("{base}/ui/#/accounts"));
    b.wait_for(
        "#shares tr[data-user='nobody']",
        "the user's fair-share row",
    );
    b.screenshot(&shots.join("accounts.png"));
    // Scheduler: the passes run so far and the queue now.
    b.goto(&format!("{base}/ui/#/scheduler"));
    b.wait_text("#sched-passes", "the passes", |t| {
        t.parse::<u64>().is_ok_and(|n| n > 0)
    });
    b.wait_text("#sched-pending", "the queue", |t| t.starts_with('2'));
    b.screenshot(&shots.join("scheduler.png"));

    // The user cancels their own job, with a confirmation.
    b.goto(&format!("{base}/ui/#/job/{waiting}"));
    b.wait_text("#job-state", "the pending job", |t| t == "PENDING");
    b.click("#act-cancel");
    b.wait_for("dialog#confirm[open]", "the confirmation");
    b.click("#confirm-yes");
    b.wait_text("#job-state", "the job cancelled", |t| t == "CANCELLED");
    assert_eq!(job(&c, waiting)["state"], "CANCELLED");

    // Another user's job: the page is refused, and so is an action by hand with this
    // session's cookie and CSRF token.
    b.goto(&format!("{base}/ui/#/job/{others}"));
    b.wait_text("main .error", "the refusal", |t| {
        t.contains("belongs to another user")
    });
    assert!(b.find("#act-cancel").is_none());
    let csrf = csrf_of(&addr, &cookie);
    let cancel = |id: u64, headers: &[(&str, &str)]| {
        http(
            &addr,
            "POST",
            &format!("/api/v1/jobs/{id}/cancel"),
            headers,
            "{}",
        )
        .0
    };
    assert_eq!(
        cancel(others, &[("Cookie", &cookie), ("X-CSRF-Token", &csrf)]),
        403,
        "a user cancels another's job"
    );
    assert_eq!(
        cancel(gang, &[("Cookie", &cookie)]),
        403,
        "a change without the CSRF token"
    );
    assert_eq!(
        cancel(gang, &[("Cookie", &cookie), ("X-CSRF-Token", "0000")]),
        403,
        "a change with a wrong CSRF token"
    );
    assert_eq!(job(&c, others)["state"], "PENDING");
    assert_eq!(job(&c, gang)["state"], "RUNNING");
    // A user's session is no administrator's.
    let (status, _) = http(
        &addr,
        "POST",
        "/api/v1/nodes/node001/drain",
        &[("Cookie", &cookie), ("X-CSRF-Token", &csrf)],
        "{\"reason\":\"mine\"}",
    );
    assert_eq!(status, 403, "a user drains a node");
    // A session makes no login links (a stolen cookie must not mint lasting access), and
    // nothing without credentials gets past the pages' shell.
    let (status, _) = http(
        &addr,
        "POST",
        "/api/v1/ui/links",
        &[("Cookie", &cookie), ("X-CSRF-Token", &csrf)],
        "",
    );
    assert_eq!(status, 403, "a session makes a login link");
    for path in ["/ui/cluster", "/ui/session", "/ui/live", "/api/v1/jobs"] {
        let (status, _) = http(&addr, "GET", path, &[], "");
        assert_eq!(status, 401, "{path} without credentials");
        let (status, _) = http(&addr, "GET", path, &[("Cookie", "cadre_session=0123")], "");
        assert_eq!(status, 401, "{path} with a made-up cookie");
    }
    let (status, _) = http(&addr, "GET", "/ui/login?once=0123", &[], "");
    assert_eq!(status, 401, "a made-up link");
    // A session opened with a token ends when the token is revoked.
    let (id, second) = {
        let t: Value =
            serde_json::from_str(&c.ok(&["token", "create", "--user", "nobody", "--json"]))
                .expect("token JSON");
        (
            t["id"].as_u64().expect("an id"),
            t["token"].as_str().expect("a secret").to_owned(),
        )
    };
    let (status, answer) = http(
        &addr,
        "POST",
        "/ui/login",
        &[],
        &format!("{{\"token\":\"{second}\"}}"),
    );
    assert_eq!(status, 204, "{answer}");
    let set = answer
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .expect("a session cookie is set");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let other = set.split(';').next().expect("the cookie").to_owned();
    let (status, _) = http(&addr, "GET", "/api/v1/jobs", &[("Cookie", &other)], "");
    assert_eq!(status, 200, "the second session works");
    // A stream opened with the token itself ends with it too.
    let live = live_stream(&addr, &format!("Authorization: Bearer {second}"));
    c.ok(&["token", "revoke", &id.to_string()]);
    assert_ends(live, "a live stream outlives its revoked token");
    let (status, _) = http(&addr, "GET", "/api/v1/jobs", &[("Cookie", &other)], "");
    assert_eq!(status, 401, "a revoked token's session");

    // Logged out, the cookie is worth nothing. The click comes while the page loads: a
    // drawing still under way must not land over the login form.
    b.goto(&format!("{base}/ui/#/cluster"));
    b.click("#logout");
    b.wait_text("#login-why", "the login form again", |t| t == "Logged out.");
    assert!(b.find("#login #token").is_some());
    let (status, _) = http(&addr, "GET", "/api/v1/jobs", &[("Cookie", &cookie)], "");
    assert_eq!(status, 401, "a closed session's cookie");

    // A session that ends elsewhere (here: logged out over HTTP) ends its live streams,
    // and the open page shows the login form, with why, without being touched.
    b.type_into("#token", &nobody);
    b.click("#login button");
    b.wait_text("#who", "the user's name again", |t| t == "nobody");
    let (cookie, _) = session_cookie(&b);
    let csrf = csrf_of(&addr, &cookie);
    let live = live_stream(&addr, &format!("Cookie: {cookie}"));
    let (status, answer) = http(
        &addr,
        "POST",
        "/ui/logout",
        &[("Cookie", &cookie), ("X-CSRF-Token", &csrf)],
        "",
    );
    assert_eq!(status, 204, "{answer}");
    assert_ends(live, "the live stream outlives its session");
    b.wait_text(
        "#login-why",
        "the login form after the session ended",
        |t| t.contains("session ended"),
    );
    assert!(b.find("#login #token").is_some());
    drop(b);

    // --- an administrator, logged in with `cadre ui` --------------------------------------
    let link = c.ok(&["ui"]).trim().to_owned();
    assert!(
        link.starts_with(&format!("{base}/ui/login?once=")),
        "{link}"
    );
    let b = Browser::start(&chromium, &driver);
    b.goto(&link);
    b.wait_text("#who", "the administrator's name", |t| {
        t == "root (administrator)"
    });
    assert!(
        !b.url().contains("once="),
        "the link's secret stays in the address bar"
    );
    let path = link.strip_prefix(&base).expect("the link's path");
    let (status, _) = http(&addr, "GET", path, &[], "");
    assert_eq!(status, 401, "a link logs in once");

    // Drain node002 from its details, with a reason.
    b.wait_for("li[data-node='node002'] .node-name", "node002");
    b.click("li[data-node='node002'] .node-name");
    b.click("#drain");
    b.wait_for("dialog#confirm[open] #drain-reason", "the drain's dialog");
    b.type_into("#drain-reason", "bad fan");
    b.click("#confirm-yes");
    let state = b.wait_text(
        "li[data-node='node002'] .state",
        "node002 drained on the page",
        |t| t.eq_ignore_ascii_case("draining") || t.eq_ignore_ascii_case("drained"),
    );
    let (_, node) = c.api("GET", "/nodes/node002", None);
    assert!(
        state.eq_ignore_ascii_case(node["state"].as_str().expect("a state")),
        "{node}"
    );
    assert_eq!(node["reason"], "bad fan", "{node}");
    b.wait_text(
        "li[data-node='node002'] .reason",
        "the drain's reason",
        |t| t == "bad fan",
    );
    b.screenshot(&shots.join("cluster-admin.png"));
}

/// `cadre ui` on a controller without a TCP listener says how to get one; with `--url` it
/// makes the link for that address, and each link is new.
#[test]
fn cadre_ui_needs_the_tcp_listener_or_an_address() {
    let c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .gpus_per_node(1)
        .start();
    let out = c.run(&["ui"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("--listen"), "{err}");
    let a = c.ok(&["ui", "--url", "http://head:8080/"]);
    let b = c.ok(&["ui", "--url", "http://head:8080"]);
    assert!(a.starts_with("http://head:8080/ui/login?once="), "{a}");
    assert_ne!(a, b, "a link is made once");
    let j: Value =
        serde_json::from_str(&c.ok(&["ui", "--url", "http://head:8080", "--json"])).expect("JSON");
    assert!(j["expires"].as_u64().is_some_and(|t| t > 0), "{j}");
}

/// The dashboard's speed at scale (a benchmark: it prints figures and asserts none): a
/// controller with 1,000 nodes of 8 GPUs (`cadre server`, no agents, so that every job
/// stays queued) and 10,000 pending jobs; the time from asking for each page to its being
/// drawn in the browser, and from a change through the API to the open page showing
/// it (a cancel's row gone from the open queue page). Measured from outside the browser
/// through WebDriver, every 20 ms, each look a script that counts elements in the page
/// (a look costs a few ms). Run it on a release build for the figures the README gives:
/// `cargo test --release -p cadre --test ui -- --ignored --nocapture bench_`.
///
/// `cargo test -p cadre --test ui -- --ignored --nocapture bench_`
#[test]
#[ignore = "a benchmark; run it with --ignored --nocapture"]
fn bench_pages_with_1000_nodes_of_8_gpus_and_10000_pending_jobs() {
    use std::time::Instant;
    let Some((chromium, driver)) = chromium_paths() else {
        eprintln!("skipped: Debian's chromium and chromium-driver are not installed");
        return;
    };
    let dir = cadre_test_support::private_tempdir();
    let data = dir.path().join("data");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&data)
            .expect("a data directory");
    }
    let addr = free_addr();
    let log = std::fs::File::create(dir.path().join("server.log")).expect("a log");
    /// The controller, killed when the benchmark ends, however it ends.
    struct Server(std::process::Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let server = Server(
        cadre_test_support::clean_command(env!("CARGO_BIN_EXE_cadre"), dir.path())
            .args([
                "server",
                "--nodes",
                "1000",
                "--gpus-per-node",
                "8",
                "--listen",
                &addr,
                "--insecure",
            ])
            .arg("--data-dir")
            .arg(&data)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("cadre server starts"),
    );
    let socket = cadre_client::locate::socket_in(&cadre_test_support::run_dir_of(&data));
    let target = cadre_test_support::Target::Unix(socket.clone());
    let api = |method: &str, path: &str, body: Option<&str>| {
        cadre_test_support::api(&target, None, method, path, body)
    };
    wait_until("the controller answers", || {
        cadre_client::Client::connect(&target, None).is_ok_and(|mut c| {
            c.send_raw(hyper::Method::GET, "/whoami", None)
                .is_ok_and(|(s, _)| s.is_success())
        })
    });
    let cadre = |args: &[&str]| {
        let out = cadre_test_support::clean_command(env!("CARGO_BIN_EXE_cadre"), dir.path())
            .env("CADRE_SERVER", format!("unix://{}", socket.display()))
            .args(args)
            .output()
            .expect("cadre runs");
        assert!(
            out.status.success(),
            "cadre {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    let first: u64 = cadre(&[
        "submit",
        "--parsable",
        "--gpus-per-task",
        "8",
        "-N",
        "2",
        "--",
        "true",
    ])
    .trim()
    .parse()
    .expect("a job id");
    let (_, view) = api("GET", &format!("/jobs/{first}"), None);
    let (_, run) = api("GET", &format!("/jobs/{first}/run"), None);
    let one = serde_json::json!({"spec": view["spec"], "run": run});
    let t0 = Instant::now();
    for _ in 0..20 {
        let batch = serde_json::json!({"jobs": vec![one.clone(); 500]}).to_string();
        let (status, v) = api("POST", "/jobs", Some(&batch));
        assert_eq!(status, 201, "{v}");
    }
    println!(
        "10,000 jobs submitted in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let link = cadre(&["ui"]).trim().to_owned();
    let b = Browser::start(&chromium, &driver);
    b.resize(1600, 1000);
    let t0 = Instant::now();
    b.goto(&link);
    b.wait("8,000 GPU cells", || b.count("span.gpu") == 8000);
    let cluster = t0.elapsed();
    let t0 = Instant::now();
    b.execute("location.hash = '#/queue';", Value::Array(vec![]));
    b.wait("the first 1,000 pending jobs", || {
        b.count("#pending tbody tr") == 1000
    });
    let queue = t0.elapsed();
    let t0 = Instant::now();
    b.execute(
        &format!("location.hash = '#/job/{first}';"),
        Value::Array(vec![]),
    );
    b.wait("the job page", || {
        b.text("#job-state").is_some_and(|t| t == "PENDING")
    });
    let job = t0.elapsed();
    b.execute("location.hash = '#/queue';", Value::Array(vec![]));
    let row = format!("#pending tr[data-job='{}']", first + 1);
    b.wait("the queue again", || b.count(&row) == 1);
    let t0 = Instant::now();
    let (status, v) = api("POST", &format!("/jobs/{}/cancel", first + 1), Some("{}"));
    assert_eq!(status, 204, "{v}");
    b.wait("the cancelled job gone from the open queue page", || {
        b.count(&row) == 0
    });
    let live = t0.elapsed();
    b.execute("location.hash = '#/cluster';", Value::Array(vec![]));
    b.wait("8,000 GPU cells again", || b.count("span.gpu") == 8000);
    b.screenshot(&screenshots().join("bench-cluster-1000x8.png"));
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    println!(
        "1,000 nodes x 8 GPUs, 10,000 pending: cluster page {:.0} ms (login included), queue page {:.0} ms, job page {:.0} ms, a cancel to the open queue page {:.0} ms",
        ms(cluster),
        ms(queue),
        ms(job),
        ms(live)
    );
    drop(b);
    drop(server);
}
