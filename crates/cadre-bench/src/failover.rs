//! `cadre bench failover`: how long replicated controllers leave the cluster without one
//! when the leader dies, beside how long a single controller takes to restart.
//!
//! **Given** a PostgreSQL database (`--database`, by default `$CADRE_TEST_POSTGRES`; a
//! schema of the bench's own, dropped at the end), `--replicas` `cadre server --replica`
//! processes on it (each its own data directory sharing the first's CA and agent key, a
//! `--leader-lease`, a cluster file of `--agents` tiny nodes), `--agents` simulated agents
//! (those of [`crate::agents`], speaking the real protocol over TLS) that know every
//! replica and go to the next when one refuses or cannot be reached, and `--jobs` held
//! jobs (a deep queue every controller recovers from the store).
//!
//! **Measured**, `--failovers` times: the leader killed with SIGKILL, then (a) the time to
//! the first accepted submission, a small job that fits a node submitted every 25 ms to
//! each replica in turn (a standby answers 503 `not_leader`, the dead one not at all), and
//! (b) the time until that job is RUNNING (a simulated agent answered its launch), then
//! (c) until every node is connected again; the killed replica is started again (it
//! stands by) before the next failover. Then the same state under one `cadre server`
//! without `--replica` (on the first replica's data directory and address), killed with
//! SIGKILL and started again at once by the bench, `--restarts` times: the same figures.
//! Counted: nodes declared lost (down) after each, by the controllers' logs (`agent
//! lost`), or not connected again within a minute (a controller declares a node lost only
//! after a whole node lease away, so one back sooner never is); jobs lost (every acknowledged job id must be in the database at the end).
//! Printed (never asserted): p50/p90/p99/max of each figure, against the target
//! (p50 <= 5 s, p99 <= 10 s, no job lost, no node lost).

use crate::agents::{
    AgentSpec, Tally, log_tail, loopback, node_name, progress, raise_open_files, simulated_agent,
};
use crate::api::{DataDir, cadre};
use anyhow::{Context, Result, bail};
use cadre_client::{Connection, Target};
use cadre_core::cluster::{NodeAvail, NodeId};
use cadre_core::job::{JobSpec, JobState};
use cadre_core::resources::TaskResources;
use cadre_core::run::RunSpec;
use cadre_core::time::Dur;
use cadre_proto::agent::NodeReport;
use cadre_proto::api::{
    ControllerStatus, JobSubmission, JobView, NodeList, NodeView, SubmitRequest, SubmitResponse,
};
use cadre_sim::report::percentile;
use clap::Args;
use hyper::Method;
use serde::Serialize;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

#[derive(Args, Debug)]
pub struct FailoverBenchArgs {
    /// Held jobs in the queue (recovered by every new leader and every restart).
    #[arg(long, default_value_t = 10_000)]
    jobs: u32,
    /// Simulated agents, one tiny node each, knowing every replica.
    #[arg(long, default_value_t = 1000)]
    agents: u32,
    /// Leaders killed, one after another.
    #[arg(long, default_value_t = 10)]
    failovers: u32,
    /// Restarts of the single controller, for the side by side [default: --failovers].
    #[arg(long)]
    restarts: Option<u32>,
    /// Replicated controllers.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=3))]
    replicas: u32,
    /// The replicas' PostgreSQL database; the bench makes a schema of its own in it and
    /// drops it at the end.
    #[arg(long, env = "CADRE_TEST_POSTGRES")]
    database: Option<String>,
    /// The replicas' --leader-lease in seconds (their default).
    #[arg(long, default_value_t = 3)]
    leader_lease: u64,
    /// The controllers' --node-lease in seconds (their default).
    #[arg(long, default_value_t = 30)]
    node_lease: u64,
    /// Keep the data directories (default: a temporary one, removed after).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

/// How long the bench waits for a controller to accept a submission, or start a job,
/// before it counts the attempt failed.
const GIVE_UP: Duration = Duration::from_secs(60);
/// How often a submission is tried, and a job's state looked at.
const POLL: Duration = Duration::from_millis(25);
/// Held jobs per submission while the queue is filled.
const BATCH: u32 = 500;
/// Connections being opened at once by the simulated agents.
const CONNECTING_AT_ONCE: usize = 64;

#[derive(Serialize, Default)]
struct Figures {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Figures {
    fn of(samples: &[f64]) -> Figures {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Figures {
            p50: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            max: sorted.last().copied().unwrap_or(0.0),
        }
    }
}

/// One kill and what followed it.
#[derive(Serialize, Clone, Debug, Default)]
struct Outage {
    /// From the kill to the first submission accepted.
    submit_s: Option<f64>,
    /// From the kill to that job RUNNING.
    started_s: Option<f64>,
    /// From the kill to every node connected again.
    reconnected_s: Option<f64>,
    /// Nodes the controller reported down once every node was connected again.
    down: usize,
    /// Nodes still not connected when the bench gave up waiting (counted lost).
    not_reconnected: usize,
}

#[derive(Serialize)]
struct Phase {
    outages: usize,
    /// Outages in which no submission was accepted, or the job did not start, in time.
    failed: usize,
    submit_s: Figures,
    started_s: Figures,
    reconnected_s: Figures,
}

impl Phase {
    fn of(outages: &[Outage]) -> Phase {
        let pick = |f: fn(&Outage) -> Option<f64>| -> Vec<f64> {
            outages.iter().filter_map(f).collect::<Vec<_>>()
        };
        Phase {
            outages: outages.len(),
            failed: outages
                .iter()
                .filter(|o| o.submit_s.is_none() || o.started_s.is_none())
                .count(),
            submit_s: Figures::of(&pick(|o| o.submit_s)),
            started_s: Figures::of(&pick(|o| o.started_s)),
            reconnected_s: Figures::of(&pick(|o| o.reconnected_s)),
        }
    }
}

#[derive(Serialize)]
struct FailoverReport {
    replicas: u32,
    agents: u32,
    jobs: u32,
    leader_lease_s: u64,
    node_lease_s: u64,
    /// The queue filled, in seconds.
    fill_s: f64,
    failover: Phase,
    single: Phase,
    failovers: Vec<Outage>,
    restarts: Vec<Outage>,
    /// Nodes declared lost across the failovers: reported down after one, logged as lost
    /// by a leader, or not connected again within a minute (a node is declared lost only
    /// after a whole node lease away: one back sooner never is).
    nodes_lost: usize,
    nodes_lost_names: Vec<String>,
    /// The same across the single controller's restarts.
    nodes_lost_single: usize,
    /// Jobs acknowledged (held and probes) and how many of them the database lacks at
    /// the end.
    jobs_acknowledged: usize,
    jobs_lost: usize,
    /// Probes started by one leader and no longer RUNNING at the end (requeued or ended
    /// by a later one).
    probes_not_running: usize,
    target_met: bool,
}

/// A schema of the bench's own in the database, and the URL that uses it.
struct Schema {
    admin: postgres::Client,
    name: String,
    url: String,
}

impl Schema {
    fn new(database: &str) -> Result<Schema> {
        let mut admin = postgres::Client::connect(database, postgres::NoTls)
            .with_context(|| format!("failed to connect to the database {database}"))?;
        let name = format!("cadre_bench_failover_{}", std::process::id());
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .with_context(|| format!("failed to create the schema {name}"))?;
        let sep = if database.contains('?') { '&' } else { '?' };
        Ok(Schema {
            url: format!("{database}{sep}options=-c%20search_path%3D{name}"),
            admin,
            name,
        })
    }

    fn job_ids(&mut self) -> Result<BTreeSet<u64>> {
        Ok(self
            .admin
            .query(&format!("SELECT id FROM {}.jobs", self.name), &[])
            .context("failed to list the jobs in the database")?
            .iter()
            .map(|r| r.get::<_, i64>(0) as u64)
            .collect())
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ = self
            .admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

/// One controller process: how to start it again, and the one running.
struct Server {
    data: PathBuf,
    run: PathBuf,
    listen: String,
    log: PathBuf,
    replica: bool,
    child: Option<Child>,
}

impl Server {
    fn new(dir: &Path, name: &str) -> Result<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .context("no free port on 127.0.0.1")?;
        Ok(Server {
            data: dir.join(name),
            run: dir.join(format!("{name}.run")),
            listen: format!("127.0.0.1:{port}"),
            log: dir.join(format!("{name}.log")),
            replica: true,
            child: None,
        })
    }

    fn start(&mut self, args: &FailoverBenchArgs, database: &str, cluster: &Path) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut server = cadre()?;
        // Configured by its arguments alone.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CADRE_") {
                server.env_remove(name);
            }
        }
        server
            .arg("server")
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--run-dir")
            .arg(&self.run)
            .arg("--cluster")
            .arg(cluster)
            .args(["--database", database, "--listen", &self.listen])
            .args(["--node-lease", &args.node_lease.to_string()]);
        if self.replica {
            server.args([
                "--replica",
                "--leader-lease",
                &args.leader_lease.to_string(),
            ]);
        }
        let child = server
            .env("CADRE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("failed to start the controller")?;
        self.child = Some(child);
        Ok(())
    }

    fn target(&self) -> Target {
        Target::Unix(cadre_client::locate::socket_in(&self.run))
    }

    fn url(&self) -> String {
        format!("https://{}", self.listen)
    }

    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// Kills it with SIGKILL and waits for it to be gone.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it with SIGTERM (a leader resigns its lease).
    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            crate::api::stop(child);
        }
    }

    /// Its role as `GET /status` says, if it answers.
    async fn role(&self) -> Option<String> {
        let mut conn = Connection::open(&self.target(), None).await.ok()?;
        let status: ControllerStatus = conn
            .call::<(), _>(Method::GET, "/status", None)
            .await
            .ok()?;
        Some(status.role)
    }

    /// Waits until it answers with `role`.
    async fn wait_role(&mut self, role: &str) -> Result<()> {
        let deadline = Instant::now() + GIVE_UP;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "the controller exited while starting ({status}); {}",
                    log_tail(&self.log)
                );
            }
            if self.role().await.as_deref() == Some(role) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the controller was not {role} within {GIVE_UP:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Impossible to keep in the `Drop` of a vector of them otherwise: every process the
/// bench started goes with it.
impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A second replica's data directory: the first's CA and agent key.
fn share_keys(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700))?;
    for f in ["ca.crt", "ca.key", "agent.key"] {
        std::fs::copy(from.join(f), to.join(f))
            .with_context(|| format!("failed to copy {f} to {}", to.display()))?;
    }
    Ok(())
}

fn job(name: &str, hold: bool) -> JobSubmission {
    let per_task = TaskResources {
        cpus: 1,
        ..TaskResources::default()
    };
    // A day: a probe runs on its simulated node until the bench ends.
    let mut spec = JobSpec::simple("", "bench", 1, per_task, Dur(86_400));
    spec.name = name.into();
    spec.hold = hold;
    JobSubmission {
        spec,
        run: RunSpec::command(vec!["true".into()], PathBuf::from("/tmp")),
        array_of: None,
    }
}

/// The nodes the log says were lost, in what it wrote from byte `from` on.
fn logged_lost(log: &Path, from: u64) -> BTreeSet<String> {
    let text = std::fs::read(log).unwrap_or_default();
    String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default())
        .lines()
        .filter(|l| l.contains("agent lost"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("node="))
                .map(str::to_owned)
        })
        .collect()
}

pub fn run_failover(args: &FailoverBenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        args.agents > 0 && args.failovers > 0,
        "--agents and --failovers must be positive"
    );
    let Some(database) = args.database.as_deref().filter(|d| !d.is_empty()) else {
        bail!(
            "cadre bench failover needs a PostgreSQL database the replicas share: give \
             --database postgres://USER@HOST/DB (or set CADRE_TEST_POSTGRES); the bench \
             makes a schema of its own in it and drops it at the end"
        );
    };
    raise_open_files(u64::from(args.agents) * 2 + 1024)?;
    let mut schema = Schema::new(database)?;
    let dir = DataDir::new(&args.data_dir)?;
    let cluster = dir.path().join("cluster.toml");
    std::fs::write(
        &cluster,
        crate::tiny_cluster("bench-failover", &format!("n[1-{}]", args.agents)),
    )?;
    let mut servers = (0..args.replicas)
        .map(|i| Server::new(dir.path(), &format!("r{i}")))
        .collect::<Result<Vec<_>>>()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut bench = Bench {
        args,
        database: schema.url.clone(),
        cluster,
        acked: BTreeSet::new(),
        probes: Vec::new(),
    };
    let result = rt.block_on(bench.run(&mut servers));
    let logs: Vec<PathBuf> = servers.iter().map(|s| s.log.clone()).collect();
    rt.shutdown_timeout(Duration::from_secs(5));
    for s in &mut servers {
        s.stop();
    }
    let mut report = match result {
        Ok(report) => report,
        Err(e) => {
            let tails: Vec<String> = logs.iter().map(|l| log_tail(l)).collect();
            return Err(e.context(tails.join("\n")));
        }
    };
    let present = schema.job_ids()?;
    report.jobs_acknowledged = bench.acked.len();
    report.jobs_lost = bench.acked.difference(&present).count();
    report.target_met = report.failover.failed == 0
        && report.failover.submit_s.p50 <= 5.0
        && report.failover.submit_s.p99 <= 10.0
        && report.failover.started_s.p50 <= 5.0
        && report.failover.started_s.p99 <= 10.0
        && report.nodes_lost == 0
        && report.jobs_lost == 0;
    print(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

struct Bench<'a> {
    args: &'a FailoverBenchArgs,
    /// The database URL with the bench's schema.
    database: String,
    cluster: PathBuf,
    /// Every job id a controller acknowledged.
    acked: BTreeSet<u64>,
    /// The probe jobs seen RUNNING.
    probes: Vec<u64>,
}

impl Bench<'_> {
    async fn run(&mut self, servers: &mut [Server]) -> Result<FailoverReport> {
        let args = self.args;
        // The first replica leads; the others share its keys and stand by.
        servers[0].start(args, &self.database, &self.cluster)?;
        servers[0].wait_role("leader").await?;
        for i in 1..servers.len() {
            share_keys(&servers[0].data, &servers[i].data)?;
            servers[i].start(args, &self.database, &self.cluster)?;
            servers[i].wait_role("standby").await?;
        }
        let every = Target::Any(servers.iter().map(Server::target).collect());

        // The deep queue.
        let bar = progress(u64::from(args.jobs), "held jobs submitted");
        let t = Instant::now();
        let mut conn = Connection::open(&every, None).await?;
        let mut left = args.jobs;
        while left > 0 {
            let n = left.min(BATCH);
            let req = SubmitRequest {
                jobs: (0..n).map(|_| job("held", true)).collect(),
                dry_run: false,
            };
            let answer: SubmitResponse = conn.call(Method::POST, "/jobs", Some(&req)).await?;
            self.acked.extend(answer.job_ids.iter().map(|id| id.0));
            left -= n;
            bar.inc(u64::from(n));
        }
        let fill_s = t.elapsed().as_secs_f64();
        bar.finish_and_clear();

        // The agents, each knowing every replica.
        let ca_path = servers[0].run.join(cadre_tls::CA_CERT_FILE);
        let ca_pem = std::fs::read_to_string(&ca_path)
            .with_context(|| format!("the controllers' CA {}", ca_path.display()))?;
        let key = std::fs::read_to_string(servers[0].data.join("agent.key"))
            .context("the cluster's agent key")?
            .trim()
            .to_owned();
        let tls = cadre_tls::client_config(&ca_pem, &ca_path, None)?;
        let shape = cadre_core::config::load_cluster(
            &crate::tiny_cluster("bench-failover", &format!("n[1-{}]", args.agents)),
            "the bench's cluster",
        )?
        .shape(NodeId(0))
        .clone();
        let report = Arc::new(NodeReport {
            shape,
            emulated_gpus: false,
            address: String::new(),
            notes: vec!["a simulated agent of cadre bench failover".into()],
            container_runtime: None,
        });
        let urls: Arc<[String]> = servers.iter().map(Server::url).collect();
        let tally = Arc::new(Tally::default());
        let gate = Arc::new(Semaphore::new(CONNECTING_AT_ONCE));
        let mut tasks = Vec::with_capacity(args.agents as usize);
        for i in 0..args.agents {
            let spec = AgentSpec {
                node: node_name(i),
                key: key.clone(),
                tls: tls.clone(),
                from: loopback(i),
            };
            tasks.push(tokio::spawn(simulated_agent(
                spec,
                Arc::clone(&urls),
                Arc::clone(&report),
                Arc::clone(&gate),
                Arc::clone(&tally),
                None,
            )));
        }
        self.wait_connected(&servers[0].target(), &tally, None)
            .await?;

        // The failovers.
        let mut leader = 0;
        let mut failovers = Vec::new();
        let mut lost = BTreeSet::new();
        let bar = progress(u64::from(args.failovers), "failovers");
        for i in 0..args.failovers {
            let from: Vec<u64> = servers.iter().map(Server::log_len).collect();
            servers[leader].kill();
            let killed = Instant::now();
            let mut outage = Outage::default();
            let probe = self
                .probe(servers, &format!("failover-{i}"), killed, &mut outage)
                .await;
            let new_leader = match probe {
                Some(at) => at,
                None => self.find_leader(servers).await?,
            };
            // The killed replica comes back, and stands by.
            servers[leader].start(args, &self.database, &self.cluster)?;
            let target = servers[new_leader].target();
            self.reconnected(&target, &tally, killed, &mut outage, &mut lost)
                .await?;
            servers[leader].wait_role("standby").await?;
            let down = self.down_nodes(&target).await?;
            outage.down = down.len();
            lost.extend(down);
            for (s, from) in servers.iter().zip(from) {
                lost.extend(logged_lost(&s.log, from));
            }
            failovers.push(outage);
            leader = new_leader;
            bar.inc(1);
        }
        bar.finish_and_clear();

        // The same state under one controller, restarted.
        for s in servers.iter_mut() {
            s.stop();
        }
        let single = &mut servers[0];
        single.replica = false;
        single.start(args, &self.database, &self.cluster)?;
        single.wait_role("single").await?;
        let target = single.target();
        self.wait_connected(&target, &tally, None).await?;
        let mut restarts = Vec::new();
        let mut lost_single = BTreeSet::new();
        let n = args.restarts.unwrap_or(args.failovers);
        let bar = progress(u64::from(n), "restarts of a single controller");
        for i in 0..n {
            let from = servers[0].log_len();
            servers[0].kill();
            let killed = Instant::now();
            servers[0].start(args, &self.database, &self.cluster)?;
            let mut outage = Outage::default();
            self.probe(&servers[..1], &format!("restart-{i}"), killed, &mut outage)
                .await;
            self.reconnected(&target, &tally, killed, &mut outage, &mut lost_single)
                .await?;
            let down = self.down_nodes(&target).await?;
            outage.down = down.len();
            lost_single.extend(down);
            lost_single.extend(logged_lost(&servers[0].log, from));
            restarts.push(outage);
            bar.inc(1);
        }
        bar.finish_and_clear();
        let probes_not_running = self.probes_not_running(&target).await?;
        for t in tasks {
            t.abort();
        }
        Ok(FailoverReport {
            replicas: args.replicas,
            agents: args.agents,
            jobs: args.jobs,
            leader_lease_s: args.leader_lease,
            node_lease_s: args.node_lease,
            fill_s,
            failover: Phase::of(&failovers),
            single: Phase::of(&restarts),
            failovers,
            restarts,
            nodes_lost: lost.len(),
            nodes_lost_names: lost.into_iter().collect(),
            nodes_lost_single: lost_single.len(),
            jobs_acknowledged: 0,
            jobs_lost: 0,
            probes_not_running,
            target_met: false,
        })
    }

    /// Submits a probe job to each controller in turn every [`POLL`] until one accepts
    /// it, then waits for it to run; records both times from `killed` in `outage`, and
    /// returns which controller accepted it.
    async fn probe(
        &mut self,
        servers: &[Server],
        name: &str,
        killed: Instant,
        outage: &mut Outage,
    ) -> Option<usize> {
        let req = SubmitRequest {
            jobs: vec![job(name, false)],
            dry_run: false,
        };
        let deadline = killed + GIVE_UP;
        let (at, id, mut conn) = 'found: loop {
            for (at, s) in servers.iter().enumerate() {
                let Ok(mut conn) = Connection::open(&s.target(), None).await else {
                    continue;
                };
                if let Ok(answer) = conn
                    .call::<_, SubmitResponse>(Method::POST, "/jobs", Some(&req))
                    .await
                {
                    outage.submit_s = Some(killed.elapsed().as_secs_f64());
                    let id = answer.job_ids.first()?.0;
                    self.acked.insert(id);
                    break 'found (at, id, conn);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        };
        while Instant::now() < deadline {
            if let Ok(view) = conn
                .call::<(), JobView>(Method::GET, &format!("/jobs/{id}"), None)
                .await
                && view.state == JobState::Running
            {
                outage.started_s = Some(killed.elapsed().as_secs_f64());
                self.probes.push(id);
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        Some(at)
    }

    /// Which controller leads now.
    async fn find_leader(&self, servers: &[Server]) -> Result<usize> {
        let deadline = Instant::now() + GIVE_UP;
        loop {
            for (at, s) in servers.iter().enumerate() {
                if s.role().await.as_deref() == Some("leader") {
                    return Ok(at);
                }
            }
            if Instant::now() >= deadline {
                bail!("no replica leads {GIVE_UP:?} after the kill");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the controller at `target` reports every node connected: the seconds
    /// since `since`.
    async fn wait_connected(
        &self,
        target: &Target,
        tally: &Tally,
        since: Option<Instant>,
    ) -> Result<f64> {
        let n = self.args.agents as usize;
        let start = since.unwrap_or_else(Instant::now);
        let deadline = Instant::now() + GIVE_UP + Duration::from_millis(20) * n as u32;
        let every = Duration::from_millis(50 + n as u64 / 20);
        loop {
            if let Some(why) = tally.first_fatal() {
                bail!("a simulated agent gave up: {why}");
            }
            if let Ok(mut conn) = Connection::open(target, None).await
                && let Ok(nodes) = conn.call::<(), NodeList>(Method::GET, "/nodes", None).await
                && nodes.nodes.iter().filter(|n| n.connected).count() == n
            {
                return Ok(start.elapsed().as_secs_f64());
            }
            if Instant::now() >= deadline {
                bail!(
                    "not every agent connected in time ({} welcomed now)",
                    tally.up.load(Ordering::Relaxed)
                );
            }
            tokio::time::sleep(every).await;
        }
    }

    /// The nodes the controller at `target` reports down.
    async fn down_nodes(&self, target: &Target) -> Result<Vec<String>> {
        self.nodes_where(target, |n| n.avail == NodeAvail::Down)
            .await
    }

    /// Waits for every node to be connected to the controller at `target` again after
    /// `killed`, into `outage`; the nodes still away then count as lost.
    async fn reconnected(
        &self,
        target: &Target,
        tally: &Tally,
        killed: Instant,
        outage: &mut Outage,
        lost: &mut BTreeSet<String>,
    ) -> Result<()> {
        outage.reconnected_s = self.wait_connected(target, tally, Some(killed)).await.ok();
        if outage.reconnected_s.is_none() {
            let away = self.away_nodes(target).await?;
            outage.not_reconnected = away.len();
            lost.extend(away);
        }
        Ok(())
    }

    /// The nodes the controller at `target` reports not connected.
    async fn away_nodes(&self, target: &Target) -> Result<Vec<String>> {
        self.nodes_where(target, |n| !n.connected).await
    }

    async fn nodes_where(
        &self,
        target: &Target,
        keep: impl Fn(&NodeView) -> bool,
    ) -> Result<Vec<String>> {
        let nodes: NodeList = Connection::open(target, None)
            .await?
            .call::<(), _>(Method::GET, "/nodes", None)
            .await?;
        Ok(nodes
            .nodes
            .into_iter()
            .filter(|n| keep(n))
            .map(|n| n.name)
            .collect())
    }

    /// Probes seen RUNNING that no longer are.
    async fn probes_not_running(&self, target: &Target) -> Result<usize> {
        let mut conn = Connection::open(target, None).await?;
        let mut n = 0;
        for id in &self.probes {
            let view: JobView = conn
                .call::<(), _>(Method::GET, &format!("/jobs/{id}"), None)
                .await?;
            n += usize::from(view.state != JobState::Running);
        }
        Ok(n)
    }
}

fn print(r: &FailoverReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    println!(
        "{} replicas (cadre server --replica, leader lease {} s, node lease {} s) on PostgreSQL; {} simulated agents knowing every replica; {} held jobs queued in {:.1} s",
        r.replicas, r.leader_lease_s, r.node_lease_s, r.agents, r.jobs, r.fill_s
    );
    println!(
        "{:<52} {:>7} {:>7} {:>7} {:>7}",
        "seconds from the kill", "p50", "p90", "p99", "max"
    );
    let row = |what: &str, f: &Figures| {
        println!(
            "{what:<52} {:>7.2} {:>7.2} {:>7.2} {:>7.2}",
            f.p50, f.p90, f.p99, f.max
        );
    };
    for (phase, p) in [
        (format!("failover ({}x)", r.failover.outages), &r.failover),
        (format!("single restart ({}x)", r.single.outages), &r.single),
    ] {
        row(&format!("{phase}: first submission accepted"), &p.submit_s);
        row(&format!("{phase}: first job started"), &p.started_s);
        row(&format!("{phase}: every node connected"), &p.reconnected_s);
    }
    if r.failover.failed + r.single.failed > 0 {
        println!(
            "outages with no submission accepted or no job started within {} s: {} failovers, {} restarts",
            GIVE_UP.as_secs(),
            r.failover.failed,
            r.single.failed
        );
    }
    println!(
        "nodes declared lost: {} across the failovers{}, {} across the restarts",
        r.nodes_lost,
        if r.nodes_lost_names.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.nodes_lost_names.join(", "))
        },
        r.nodes_lost_single
    );
    println!(
        "jobs lost: {} of {} acknowledged; probes started and no longer running: {}",
        r.jobs_lost, r.jobs_acknowledged, r.probes_not_running
    );
    println!(
        "target (failover p50 <= 5 s and p99 <= 10 s to the first submission and the first job started, no job lost, no node lost): {}",
        if r.target_met { "met" } else { "not met" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lost_agents_count_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("r0.log");
        let before = "x WARN agent lost: node down node=n1\n";
        let after = "x INFO agent reconnected; the older connection is dropped node=n2 old=4\n\
                     x WARN agent disconnected node=n3\n\
                     x WARN cadre_server::controller: agent lost: node down node=n4\n";
        std::fs::write(&log, format!("{before}{after}")).unwrap();
        let lost = logged_lost(&log, before.len() as u64);
        assert_eq!(lost.into_iter().collect::<Vec<_>>(), vec!["n4".to_string()]);
    }

    #[test]
    fn figures_of_no_sample_are_zero_and_of_some_are_their_percentiles() {
        let f = Figures::of(&[]);
        assert_eq!((f.p50, f.max), (0.0, 0.0));
        let f = Figures::of(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!((f.p50, f.p90, f.max), (2.0, 10.0, 10.0));
    }
}
