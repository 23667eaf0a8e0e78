//! The ranks of applied workloads seen as Kubernetes shows pods: `cadre get pods`, `cadre
//! logs`, and `cadre wait --for=condition=...` on a workload.
//!
//! A workload's rank is a pod: its name is the one its kind gives it
//! ([`cadre_k8s::pod_name`]), its labels those Kubernetes and the operators set
//! ([`cadre_k8s::pod_labels`]), its status its job's, its node the one its rank holds. Its
//! output is read from the agent of its node (`GET /jobs/ID/output`), or, when the agent
//! keeps it no longer, from the rank's output file where this machine sees it.

use crate::k8s::{Identity, KindName, Output, age, kind_named, print_table, workload_jobs};
use anyhow::{Context, Result, bail};
use cadre_cli::ConnectArgs;
use cadre_core::job::JobState;
use cadre_core::run::RunSpec;
use cadre_k8s::{Selector, Translated};
use cadre_proto::api::{JobView, NodeList, TaskOutput};
use cadre_proto::exit;
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// One rank of an applied workload, as a pod.
#[derive(Clone, Debug, Serialize)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    /// The workload it belongs to (`pytorchjob.kubeflow.org/ddp`).
    pub owner: String,
    pub job: u64,
    /// Its rank over the job (`SLURM_PROCID`).
    pub task: u32,
    pub container: String,
    pub status: String,
    pub ready: bool,
    pub restarts: u32,
    pub node: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// When it started, else when it was submitted (seconds since 1970).
    pub since: u64,
    /// Its output file, as the node sees it.
    pub output_file: PathBuf,
    #[serde(skip)]
    state: JobState,
}

/// A pod's status as `kubectl get pods` words it.
fn status_of(state: JobState) -> &'static str {
    match state {
        JobState::Pending => "Pending",
        JobState::Running => "Running",
        JobState::Preempting => "Terminating",
        JobState::Completed => "Completed",
        JobState::Failed | JobState::NodeFail => "Error",
        JobState::OutOfMemory => "OOMKilled",
        JobState::Timeout => "DeadlineExceeded",
        JobState::Cancelled | JobState::Preempted => "Terminated",
    }
}

/// The pods of one workload's job.
fn pods_of(job: &JobView, identity: &Identity, t: &Translated, nodes: &NodeList) -> Vec<Pod> {
    // Ranks in (group, index) order: `SLURM_PROCID`'s.
    let mut ranks: Vec<(usize, u32, Option<String>)> = match &job.allocation {
        Some(alloc) => {
            let mut tasks: Vec<_> = alloc.tasks.iter().collect();
            tasks.sort_by_key(|x| (x.group, x.rank));
            tasks
                .iter()
                .map(|x| {
                    let node = nodes
                        .nodes
                        .get(x.node.0 as usize)
                        .map_or_else(|| format!("node id {}", x.node.0), |n| n.name.clone());
                    (usize::from(x.group), x.rank, Some(node))
                })
                .collect()
        }
        None => t
            .spec
            .groups
            .iter()
            .enumerate()
            .flat_map(|(g, group)| (0..group.count).map(move |i| (g, i, None)))
            .collect(),
    };
    // A pending job's earlier placement is not where it will run.
    if job.state == JobState::Pending {
        for r in &mut ranks {
            r.2 = None;
        }
    }
    ranks
        .into_iter()
        .enumerate()
        .map(|(task, (g, index, node))| Pod {
            name: cadre_k8s::pod_name(t, g, index),
            namespace: identity.namespace.clone(),
            owner: identity.object(),
            job: job.id.0,
            task: task as u32,
            container: t
                .groups
                .get(g)
                .map(|x| x.container.clone())
                .unwrap_or_default(),
            status: status_of(job.state).to_string(),
            ready: job.state == JobState::Running,
            restarts: job.requeues,
            node,
            labels: cadre_k8s::pod_labels(t, g, index),
            since: job.start_time.unwrap_or(job.submit_time),
            output_file: t
                .host_dir(g)
                .unwrap_or_default()
                .join(format!("{}-{}-{task}.out", t.name, job.id.0)),
            state: job.state,
        })
        .collect()
}

/// Which pods to look at.
#[derive(Default)]
struct PodFilter<'a> {
    /// `None`: every namespace.
    namespace: Option<&'a str>,
    selector: Option<&'a Selector>,
    /// Only this workload's.
    workload: Option<(KindName, &'a str)>,
    /// Only the pod of this name.
    name: Option<&'a str>,
}

/// The latest job of every applied workload that `keep` keeps, with its identity, in the
/// order of their namespaces, kinds and names.
fn latest_workloads(
    client: &mut cadre_client::Client,
    keep: impl Fn(&Identity) -> bool,
) -> Result<Vec<(Identity, JobView)>> {
    let mut latest: BTreeMap<(String, String, String, String), (Identity, JobView)> =
        BTreeMap::new();
    for (identity, job) in workload_jobs(client)? {
        if !keep(&identity) {
            continue;
        }
        let key = (
            identity.namespace.clone(),
            identity.kind.clone(),
            identity.api_version.clone(),
            identity.name.clone(),
        );
        // Jobs come in id order: the last of a name is its latest.
        latest.insert(key, (identity, job));
    }
    Ok(latest.into_values().collect())
}

/// The pods of the latest job of every applied workload the filter keeps.
fn list_pods(client: &mut cadre_client::Client, f: &PodFilter<'_>) -> Result<Vec<Pod>> {
    let latest = latest_workloads(client, |identity| {
        f.namespace.is_none_or(|n| n == identity.namespace)
            && f.workload
                .is_none_or(|(kind, name)| identity.is(kind) && identity.name == name)
    })?;
    let nodes: NodeList = if latest.is_empty() {
        NodeList { nodes: Vec::new() }
    } else {
        client.get("/nodes")?
    };
    let mut pods = Vec::new();
    for (identity, job) in &latest {
        let run: RunSpec = client.get(&format!("/jobs/{}/run", job.id))?;
        let Some(t) = cadre_k8s::workload_of(&run)? else {
            continue;
        };
        pods.extend(
            pods_of(job, identity, &t, &nodes)
                .into_iter()
                .filter(|p| f.name.is_none_or(|n| n == p.name))
                .filter(|p| f.selector.is_none_or(|s| s.matches(&p.labels))),
        );
    }
    Ok(pods)
}

fn selector(text: Option<&str>) -> Result<Option<Selector>> {
    text.map(|s| Selector::parse(s).map_err(|e| anyhow::anyhow!("-l {s}: {e}")))
        .transpose()
}

fn pod_row(p: &Pod, all_namespaces: bool, wide: bool) -> Vec<String> {
    let mut row = Vec::new();
    if all_namespaces {
        row.push(p.namespace.clone());
    }
    row.extend([
        p.name.clone(),
        if p.ready { "1/1" } else { "0/1" }.to_string(),
        p.status.clone(),
        p.restarts.to_string(),
        age(p.since),
        p.node.clone().unwrap_or_else(|| "<none>".into()),
    ]);
    if wide {
        row.push(p.job.to_string());
        row.push(p.owner.clone());
    }
    row
}

/// `cadre get pods [-l SELECTOR] [-w]`.
fn get_pods(
    conn: &ConnectArgs,
    namespace: &str,
    all_namespaces: bool,
    selector_text: Option<&str>,
    watch: bool,
    output: Option<Output>,
) -> Result<ExitCode> {
    let sel = selector(selector_text)?;
    let mut client = conn.client()?;
    let filter = PodFilter {
        namespace: (!all_namespaces).then_some(namespace),
        selector: sel.as_ref(),
        ..PodFilter::default()
    };
    let pods = list_pods(&mut client, &filter)?;
    let wide = output == Some(Output::Wide);
    match output {
        Some(Output::Json) => println!("{}", serde_json::to_string_pretty(&pods)?),
        Some(Output::Yaml) => print!("{}", yaml_serde::to_string(&pods)?),
        None | Some(Output::Wide) => {
            if pods.is_empty() && !watch {
                eprintln!(
                    "No resources found{}.",
                    if all_namespaces {
                        String::new()
                    } else {
                        format!(" in {namespace} namespace")
                    }
                );
                return Ok(ExitCode::SUCCESS);
            }
            let mut head: Vec<&str> = Vec::new();
            if all_namespaces {
                head.push("NAMESPACE");
            }
            head.extend(["NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"]);
            if wide {
                head.extend(["JOB", "OWNER"]);
            }
            let mut table = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
            table.extend(pods.iter().map(|p| pod_row(p, all_namespaces, wide)));
            print_table(&table);
        }
    }
    if !watch {
        return Ok(ExitCode::SUCCESS);
    }
    // As `kubectl get -w`: a line for each pod whose status, readiness, restarts or node
    // changes (or that appears), until interrupted.
    let key = |p: &Pod| (p.status.clone(), p.ready, p.restarts, p.node.clone());
    let mut seen: BTreeMap<(String, String), _> = pods
        .iter()
        .map(|p| ((p.namespace.clone(), p.name.clone()), key(p)))
        .collect();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        for p in list_pods(&mut client, &filter)? {
            let k = (p.namespace.clone(), p.name.clone());
            if seen.get(&k) != Some(&key(&p)) {
                seen.insert(k, key(&p));
                match output {
                    Some(Output::Json) => println!("{}", serde_json::to_string(&p)?),
                    Some(Output::Yaml) => print!("---\n{}", yaml_serde::to_string(&p)?),
                    _ => println!("{}", pod_row(&p, all_namespaces, wide).join("   ")),
                }
                std::io::stdout().flush().ok();
            }
        }
    }
}

/// `cadre get pods` and `cadre get services`; `None` for what else `cadre get` lists.
pub fn get(conn: &ConnectArgs, a: &crate::k8s::GetArgs) -> Option<Result<ExitCode>> {
    match a.what.to_ascii_lowercase().as_str() {
        "services" | "service" | "svc" => {
            Some(get_services(conn, &a.namespace, a.all_namespaces, a.output))
        }
        "pods" | "pod" | "po" => Some(get_pods(
            conn,
            &a.namespace,
            a.all_namespaces,
            a.selector.as_deref(),
            a.watch,
            a.output,
        )),
        _ => None,
    }
}

/// `cadre get services`: the Services kept with the latest job of each workload, and those
/// kept on their own (`WITH` is `-`).
fn get_services(
    conn: &ConnectArgs,
    namespace: &str,
    all_namespaces: bool,
    output: Option<Output>,
) -> Result<ExitCode> {
    use cadre_k8s::service::{ports_text, selector_text};
    let mut client = conn.client()?;
    let latest = latest_workloads(&mut client, |i| all_namespaces || i.namespace == namespace)?;
    let mut rows: Vec<(cadre_k8s::service::Service, u64, String)> = Vec::new();
    for (_, job) in &latest {
        let run: RunSpec = client.get(&format!("/jobs/{}/run", job.id))?;
        if let Some(t) = cadre_k8s::workload_of(&run)? {
            for s in &t.services {
                rows.push((s.clone(), job.submit_time, format!("job {}", job.id.0)));
            }
        }
    }
    // And those kept on their own that no workload listed above was given.
    let kept: cadre_proto::api::QueueObjectList = client.get("/queue-objects")?;
    for o in kept
        .objects
        .iter()
        .filter(|o| o.kind == "Service" && (all_namespaces || o.namespace == namespace))
    {
        if rows
            .iter()
            .any(|(s, _, _)| s.namespace == o.namespace && s.name == o.name)
        {
            continue;
        }
        let origin = format!("Service `{}/{}`", o.namespace, o.name);
        if let Ok(mut objects) = cadre_k8s::parse_numbered(&o.manifest.to_string(), &origin)
            && let Some((_, cadre_k8s::Object::Service(svc))) = objects.pop()
            && let Ok(s) = cadre_k8s::service::read_service(&svc, &o.namespace)
        {
            rows.push((s, o.applied, "-".into()));
        }
    }
    match output {
        Some(Output::Json) => {
            let v: Vec<_> = rows.iter().map(|r| &r.0).collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Some(Output::Yaml) => {
            let v: Vec<_> = rows.iter().map(|r| &r.0).collect();
            print!("{}", yaml_serde::to_string(&v)?);
        }
        None | Some(Output::Wide) => {
            if rows.is_empty() {
                eprintln!("No resources found.");
                return Ok(ExitCode::SUCCESS);
            }
            let mut head = Vec::new();
            if all_namespaces {
                head.push("NAMESPACE");
            }
            head.extend([
                "NAME",
                "TYPE",
                "CLUSTER-IP",
                "PORT(S)",
                "AGE",
                "SELECTOR",
                "WITH",
            ]);
            let mut table = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
            for (s, since, with) in &rows {
                let mut row = Vec::new();
                if all_namespaces {
                    row.push(s.namespace.clone());
                }
                row.extend([
                    s.name.clone(),
                    "ClusterIP".into(),
                    if s.headless { "None" } else { "<node>" }.into(),
                    ports_text(s),
                    age(*since),
                    selector_text(s),
                    with.clone(),
                ]);
                table.push(row);
            }
            print_table(&table);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cadre logs`.
#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    /// `pod/NAME` or `NAME` (a pod: one rank), or `KIND/NAME` (every rank of an applied
    /// workload: `job/train`, `pytorchjob/ddp`, `mpijob/pi`, `jobset/js`, `vcjob/v`).
    /// Without it, `-l` picks the pods.
    pub target: Option<String>,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Only pods whose labels match (`job-name=train`, `training.kubeflow.org/replica-type
    /// in (worker)`, `app,!canary`), as `kubectl -l` reads it.
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Keep printing what the ranks write until they have all ended.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the last N lines of each rank's output (of its last 256 KiB).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// The container (a pod of cadre's has one: its name is accepted, any other refused).
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Begin each line with `[pod/NAME/CONTAINER] `; the default when several pods print.
    #[arg(long)]
    pub prefix: bool,
    /// The rank's standard error, when its manifest or job writes it to a file of its own
    /// (by default both go to one file, which this prints).
    #[arg(long)]
    pub stderr: bool,
}

/// Bytes asked for in one read.
const PIECE: u32 = 256 * 1024;

/// One pod's output as it is read: where the next read starts, and what is printed of a
/// line not yet ended.
struct Follow {
    pod: Pod,
    next: Option<u64>,
    partial: String,
    done: bool,
    /// Read from the file on this machine (the agent keeps it no longer).
    from_file: bool,
}

/// What one read of a pod's output gave.
enum Piece {
    Data {
        data: String,
        next: u64,
        more: bool,
        ended: bool,
    },
    /// The rank has not started yet (its job is pending).
    NotYet,
}

fn read_piece(
    client: &mut cadre_client::Client,
    f: &mut Follow,
    stream: &str,
    tail_bytes: bool,
) -> Result<Piece> {
    if f.from_file {
        return read_file_piece(f, tail_bytes);
    }
    let from = match (f.next, tail_bytes) {
        (Some(n), _) => format!("&offset={n}"),
        (None, true) => String::new(),
        (None, false) => "&offset=0".into(),
    };
    let path = format!(
        "/jobs/{}/output?task={}&stream={stream}&limit={PIECE}{from}",
        f.pod.job, f.pod.task
    );
    match client.get::<TaskOutput>(&path) {
        Ok(TaskOutput { piece: p, .. }) => Ok(Piece::Data {
            more: p.next_offset < p.size,
            data: p.data,
            next: p.next_offset,
            ended: p.ended,
        }),
        Err(e) => {
            match e.api_failure().map(|x| x.status) {
                Some(409) => Ok(Piece::NotYet),
                // The agent keeps it no longer (or never had it): the file, if this
                // machine sees it.
                Some(404) if f.pod.output_file.is_file() && stream == "stdout" => {
                    f.from_file = true;
                    read_file_piece(f, tail_bytes)
                }
                _ => Err(anyhow::Error::new(e).context(format!(
                    "pod/{}: its output is in {} on node {}",
                    f.pod.name,
                    f.pod.output_file.display(),
                    f.pod.node.as_deref().unwrap_or("<none>")
                ))),
            }
        }
    }
}

/// Reads the pod's output file directly, as this user (the rank's own file, on a file
/// system this machine shares with its node).
fn read_file_piece(f: &mut Follow, tail_bytes: bool) -> Result<Piece> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(&f.pod.output_file)
        .with_context(|| format!("pod/{}: {}", f.pod.name, f.pod.output_file.display()))?;
    let size = file.metadata()?.len();
    let start = match (f.next, tail_bytes) {
        (Some(n), _) => n,
        (None, true) => size.saturating_sub(u64::from(PIECE)),
        (None, false) => 0,
    };
    file.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    file.take(u64::from(PIECE)).read_to_end(&mut buf)?;
    let next = start + buf.len() as u64;
    Ok(Piece::Data {
        data: String::from_utf8_lossy(&buf).into_owned(),
        next,
        more: next < size,
        ended: !f.pod.state.is_active() && f.pod.state != JobState::Pending,
    })
}

fn print_lines(out: &mut impl Write, prefix: &str, text: &str) -> std::io::Result<()> {
    for line in text.split_inclusive('\n') {
        write!(out, "{prefix}{line}")?;
    }
    Ok(())
}

pub fn logs(conn: &ConnectArgs, a: &LogsArgs) -> Result<ExitCode> {
    let sel = selector(a.selector.as_deref())?;
    let mut filter = PodFilter {
        namespace: Some(&a.namespace),
        selector: sel.as_ref(),
        ..PodFilter::default()
    };
    let kind;
    let what = match a.target.as_deref() {
        None if sel.is_none() => {
            bail!("name a pod (pod/NAME), a workload (KIND/NAME) or -l SELECTOR")
        }
        None => format!("pods matching -l {}", a.selector.as_deref().unwrap_or("")),
        Some(t) => match t.split_once('/') {
            Some(("pod" | "pods" | "po", name)) | Some(("", name)) => {
                filter.name = Some(name);
                format!("pod/{name}")
            }
            Some((k, name)) => {
                kind = kind_named(k)?;
                filter.workload = Some((kind, name));
                t.to_string()
            }
            None => {
                filter.name = Some(t);
                format!("pod/{t}")
            }
        },
    };
    let mut client = conn.client()?;
    let pods = list_pods(&mut client, &filter)?;
    if pods.is_empty() {
        bail!("{what}: not found in namespace {}", a.namespace);
    }
    if let Some(c) = &a.container
        && let Some(p) = pods.iter().find(|p| &p.container != c)
    {
        bail!(
            "container {c} is not valid for pod {}: its one container is {}",
            p.name,
            p.container
        );
    }
    let prefix = a.prefix || pods.len() > 1;
    let stream = if a.stderr { "stderr" } else { "stdout" };
    let mut follows: Vec<Follow> = pods
        .into_iter()
        .map(|pod| Follow {
            pod,
            next: None,
            partial: String::new(),
            done: false,
            from_file: false,
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        let mut any_more = false;
        for f in follows.iter_mut().filter(|f| !f.done) {
            let tag = if prefix {
                format!("[pod/{}/{}] ", f.pod.name, f.pod.container)
            } else {
                String::new()
            };
            let first = f.next.is_none();
            let piece = read_piece(&mut client, f, stream, a.tail.is_some())?;
            let (mut data, next, more, ended) = match piece {
                Piece::NotYet if a.follow => continue,
                Piece::NotYet => {
                    f.done = true;
                    continue;
                }
                Piece::Data {
                    data,
                    next,
                    more,
                    ended,
                } => (data, next, more, ended),
            };
            if first && let Some(n) = a.tail {
                let lines: Vec<&str> = data.split_inclusive('\n').collect();
                data = lines[lines.len().saturating_sub(n)..].concat();
            }
            f.next = Some(next);
            let text = std::mem::take(&mut f.partial) + &data;
            // Whole lines now; a line not yet ended waits for its end (or the rank's).
            let (whole, rest) = match text.rfind('\n') {
                Some(i) => text.split_at(i + 1),
                None => ("", text.as_str()),
            };
            print_lines(&mut out, &tag, whole)?;
            f.partial = rest.to_string();
            let finished = ended && !more;
            if more {
                any_more = true;
            } else if finished || !a.follow {
                if !f.partial.is_empty() {
                    print_lines(&mut out, &tag, &f.partial)?;
                    writeln!(out)?;
                    f.partial.clear();
                }
                f.done = true;
            }
        }
        out.flush()?;
        if follows.iter().all(|f| f.done) {
            return Ok(ExitCode::SUCCESS);
        }
        if !any_more {
            drop(out);
            std::thread::sleep(Duration::from_secs(1));
            out = stdout.lock();
            // Pods whose job was pending may have started: their placement is read again.
            if a.follow && follows.iter().any(|f| f.pod.state == JobState::Pending) {
                let again = list_pods(&mut client, &filter)?;
                for f in follows.iter_mut() {
                    if let Some(p) = again.iter().find(|p| p.name == f.pod.name) {
                        f.pod = p.clone();
                    }
                }
            }
        }
    }
}

/// `cadre wait --for=condition=C KIND/NAME`: waits until the workload's condition holds.
pub fn wait_for(
    conn: &ConnectArgs,
    condition: &str,
    targets: &[String],
    namespace: &str,
    timeout: Option<u64>,
) -> Result<ExitCode> {
    let want = match condition.strip_prefix("condition=") {
        Some(c) => c.to_ascii_lowercase(),
        None => bail!(
            "--for={condition}: cadre waits for conditions: --for=condition=Complete or --for=condition=Failed"
        ),
    };
    if !matches!(want.as_str(), "complete" | "succeeded" | "failed") {
        bail!("--for={condition}: a workload's conditions are Complete (Succeeded) and Failed");
    }
    let mut client = conn.client()?;
    let deadline = timeout.map(|t| Instant::now() + Duration::from_secs(t));
    let mut unmet = false;
    for target in targets {
        let Some((k, name)) = target.split_once('/') else {
            bail!("`{target}`: name a workload as KIND/NAME (job/train, pytorchjob/ddp)");
        };
        let kind = kind_named(k)?;
        loop {
            let latest = workload_jobs(&mut client)?
                .into_iter()
                .rfind(|(i, _)| i.is(kind) && i.name == name && i.namespace == namespace);
            let Some((identity, job)) = latest else {
                bail!("{target}: not found in namespace {namespace}");
            };
            if job.state.is_final() {
                let complete = job.state == JobState::Completed;
                let met = (want == "failed") != complete;
                if met {
                    println!("{} condition met", identity.object());
                } else {
                    // Ended the other way: the condition can never hold.
                    eprintln!(
                        "{}: ended {} (job {}): condition {} will not be met",
                        identity.object(),
                        job.state,
                        job.id,
                        &condition["condition=".len()..]
                    );
                    unmet = true;
                }
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                eprintln!(
                    "timed out waiting for the condition on {} (job {} is {})",
                    identity.object(),
                    job.id,
                    job.state
                );
                return Ok(ExitCode::from(exit::JOB_NOT_COMPLETED));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(if unmet {
        ExitCode::from(exit::JOB_NOT_COMPLETED)
    } else {
        ExitCode::SUCCESS
    })
}
