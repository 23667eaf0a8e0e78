//! cadre's own client commands, for what Slurm's commands do not cover: `cadre submit`,
//! `cadre jobs`, `cadre nodes`, `cadre explain`, `cadre cancel`, `cadre wait` and
//! `cadre token`. Each talks to the controller's REST API ([`cadre_client`]).

use anyhow::{Context, Result};
use cadre_cli::ConnectArgs;
use cadre_client::Target;
use cadre_core::job::{JobSpec, JobState, TaskGroup};
use cadre_core::resources::TaskResources;
use cadre_core::run::RunSpec;
use cadre_core::time::{Dur, DurationError, TimeLimit, format_duration_short, parse_time_limit};
use cadre_proto::api::*;
use cadre_proto::exit;
use clap::{Args, Subcommand};
use hyper::Method;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `cadre submit`.
#[derive(Args, Debug, Clone)]
pub struct SubmitArgs {
    /// The job's name (default: the program's name).
    #[arg(short = 'J', long)]
    pub name: Option<String>,
    /// Tasks (ranks) of the job (default: nodes x tasks per node, one per node with
    /// --nodes alone, else 1).
    #[arg(short = 'n', long)]
    pub ntasks: Option<u32>,
    /// Exactly this many nodes.
    #[arg(short = 'N', long)]
    pub nodes: Option<u32>,
    /// Exactly this many tasks on each node used.
    #[arg(long)]
    pub ntasks_per_node: Option<u32>,
    #[arg(short = 'c', long, default_value_t = 1)]
    pub cpus_per_task: u32,
    #[arg(long, default_value_t = 0)]
    pub gpus_per_task: u32,
    /// Memory per task in MiB.
    #[arg(long, default_value_t = 0)]
    pub mem_per_task: u64,
    /// Time limit in Slurm's formats (`30`, `1:00:00`, `2-00:00:00`); default: none.
    #[arg(short = 't', long)]
    pub time: Option<String>,
    #[arg(short = 'p', long)]
    pub partition: Option<String>,
    /// The account to charge (default: `$CADRE_ACCOUNT`, else the user's name).
    #[arg(short = 'A', long, env = "CADRE_ACCOUNT")]
    pub account: Option<String>,
    /// stdout file pattern (`%j` job id, `%t` task, `%N` node ...).
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// stderr file pattern (default: with stdout).
    #[arg(short = 'e', long)]
    pub error: Option<String>,
    /// Working directory (default: the current one).
    #[arg(short = 'D', long)]
    pub chdir: Option<PathBuf>,
    /// Submit held.
    #[arg(short = 'H', long)]
    pub hold: bool,
    /// Whole nodes.
    #[arg(long)]
    pub exclusive: bool,
    /// Print only the job id.
    #[arg(long)]
    pub parsable: bool,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// `cadre jobs`.
#[derive(Args, Debug, Clone)]
pub struct JobsArgs {
    /// Only these states (comma-separated: pending,running,...).
    #[arg(short = 't', long)]
    pub states: Option<String>,
    /// Only this user's jobs (administrators; users always see their own).
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// At most this many jobs.
    #[arg(long)]
    pub limit: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug, Clone)]
pub enum TokenCommand {
    /// Create a token for a user; prints the secret once.
    Create {
        #[arg(long)]
        user: String,
        /// The token's holder is an administrator.
        #[arg(long)]
        admin: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List tokens (never their secrets).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id.
    Revoke { id: u64 },
}

/// `cadre node ...`.
#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// Join tokens.
    #[command(subcommand)]
    Token(JoinTokenCommand),
    /// Revoke a node's certificate: its agent's connection closes, and it must enrol again
    /// with a new join token.
    Revoke { node: String },
}

#[derive(Subcommand, Debug)]
pub enum JoinTokenCommand {
    /// Make a one-time join token; prints it once. Give it to the node's agent in a file
    /// (`cadre agent --join-file`) or in $CADRE_JOIN_TOKEN, never on a command line.
    Create {
        /// The one node it enrols [default: any node of the cluster].
        #[arg(long)]
        node: Option<String>,
        /// How long it stays valid (Slurm's time syntax, or 30m, 2h) [default: 1 hour, at
        /// most 30 days].
        #[arg(long, value_name = "DURATION")]
        ttl: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn current_user() -> String {
    cadre_client::user::current()
}

/// `cadre submit -t`'s time limit: exactly what `sbatch -t` makes of the same text (one
/// parser, cadre-core's); no `-t` is no limit, as `Dur(0)`.
pub(crate) fn time_limit_arg(time: Option<&str>) -> Result<Dur, DurationError> {
    Ok(time
        .map(parse_time_limit)
        .transpose()?
        .map_or(Dur(0), TimeLimit::dur))
}

pub fn submit(conn: &ConnectArgs, a: &SubmitArgs) -> Result<ExitCode> {
    let time_limit = time_limit_arg(a.time.as_deref())
        .map_err(|e| anyhow::anyhow!("failed to parse --time value `{}`: {}", e.input, e.reason))?;
    let mut client = conn.client()?;
    // With a token, the controller takes the caller for the token's user, whoever is
    // logged in here.
    let user = match &conn.token {
        Some(_) => client.get::<WhoAmI>("/whoami")?.user,
        None => current_user(),
    };
    let per_task = TaskResources {
        cpus: a.cpus_per_task,
        mem_mib: a.mem_per_task,
        gpus: a.gpus_per_task,
        ..TaskResources::default()
    };
    let mut spec = JobSpec::simple(
        &user,
        a.account.as_deref().unwrap_or(&user),
        a.ntasks
            .unwrap_or_else(|| match (a.nodes, a.ntasks_per_node) {
                (Some(n), Some(k)) => n * k,
                (Some(n), None) => n,
                _ => 1,
            }),
        per_task,
        time_limit,
    );
    spec.name = a.name.clone().unwrap_or_else(|| {
        std::path::Path::new(&a.command[0]).file_name().map_or_else(
            || a.command[0].clone(),
            |n| n.to_string_lossy().into_owned(),
        )
    });
    spec.partition = a.partition.clone();
    spec.hold = a.hold;
    spec.exclusive = a.exclusive;
    if let Some(TaskGroup {
        nodes,
        tasks_per_node,
        ..
    }) = spec.groups.first_mut()
    {
        *nodes = a.nodes;
        *tasks_per_node = a.ntasks_per_node;
    }
    let cwd = std::env::current_dir()?;
    let work_dir = match &a.chdir {
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => cwd.join(d),
        None => cwd.clone(),
    };
    let mut run = RunSpec::command(a.command.clone(), work_dir);
    run.submit_dir = Some(cwd);
    run.stdout = a.output.clone();
    run.stderr = a.error.clone();
    run.env = std::env::vars().collect();
    run.submit_host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok());
    let req = SubmitRequest {
        jobs: vec![JobSubmission {
            spec,
            run,
            array_of: None,
        }],
        dry_run: false,
    };
    let resp: SubmitResponse = client.send(Method::POST, "/jobs", Some(&req))?;
    for id in resp.job_ids {
        if a.parsable {
            println!("{id}");
        } else {
            println!("Submitted job {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn now_secs() -> u64 {
    cadre_client::clock::now()
}

pub fn jobs(conn: &ConnectArgs, a: &JobsArgs) -> Result<ExitCode> {
    let mut query = Vec::new();
    if let Some(s) = &a.states {
        query.push(format!("state={}", s.to_ascii_uppercase()));
    }
    if let Some(u) = &a.user {
        query.push(format!("user={u}"));
    }
    if let Some(l) = a.limit {
        query.push(format!("limit={l}"));
    }
    let path = if query.is_empty() {
        "/jobs".to_owned()
    } else {
        format!("/jobs?{}", query.join("&"))
    };
    let list: JobList = conn.client()?.get(&path)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>8} {:<16} {:<10} {:<10} {:>10} {:>5} {:>5}  NODELIST(REASON)",
        "JOBID", "NAME", "USER", "STATE", "TIME", "TASKS", "GPUS"
    );
    let now = now_secs();
    for j in list.jobs {
        let time = match (j.start_time, j.end_time, j.state) {
            (Some(s), Some(e), _) => e.saturating_sub(s),
            (Some(s), None, st) if st.is_active() => now.saturating_sub(s),
            _ => 0,
        };
        let where_ = if j.state == JobState::Pending {
            format!("({})", j.reason)
        } else {
            j.nodes.clone()
        };
        println!(
            "{:>8} {:<16} {:<10} {:<10} {:>10} {:>5} {:>5}  {}",
            j.id.0,
            truncate(&j.name, 16),
            truncate(&j.user, 10),
            j.state.to_string(),
            format_duration_short(time),
            j.tasks,
            j.gpus,
            where_
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

pub fn nodes(conn: &ConnectArgs, json: bool, long: bool) -> Result<ExitCode> {
    let list: NodeList = conn.client()?.get("/nodes")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if long {
        nodes_long(&list);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<12} {:<10} {:>9} {:>11} {:>9}  {:<9} {:<10} REASON",
        "NODE", "STATE", "CPUS(A/T)", "MEM(A/T)", "GPUS(A/T)", "AGENT", "GPU MODEL"
    );
    for n in list.nodes {
        let model = n.gpu_model.clone().unwrap_or_else(|| "-".into());
        let model = if n.emulated_gpus {
            format!("{model} (emulated)")
        } else {
            model
        };
        println!(
            "{:<12} {:<10} {:>9} {:>11} {:>9}  {:<9} {:<10} {}",
            n.name,
            n.state,
            format!("{}/{}", n.cpus_alloc, n.cpus),
            format!("{}/{}G", n.memory_alloc_mib / 1024, n.memory_mib / 1024),
            format!("{}/{}", n.gpus_alloc, n.gpus),
            if n.connected { "connected" } else { "away" },
            model,
            n.reason.unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cadre nodes --long`: each node's agent.
fn nodes_long(list: &NodeList) {
    let clock = cadre_slurm_commands::local_clock();
    let at = |t: Option<u64>| {
        t.and_then(|t| i64::try_from(t).ok()).map_or_else(
            || "-".to_string(),
            |t| cadre_slurm::time::format_timestamp(t, &clock),
        )
    };
    let ago = |t: Option<u64>| {
        t.and_then(|t| i64::try_from(t).ok()).map_or_else(
            || "-".to_string(),
            |t| format!("{}s ago", (clock.now - t).max(0)),
        )
    };
    println!(
        "{:<12} {:<10} {:<9} {:<14} {:<16} {:<11} {:<19} HEALTH",
        "NODE", "STATE", "AGENT", "VERSION", "ADDRESS", "LAST HEARD", "CERT EXPIRES"
    );
    for n in &list.nodes {
        let version = match (&n.agent_version, n.agent_protocol) {
            (Some(v), Some(p)) => format!("{v} (p{p})"),
            _ => "-".into(),
        };
        println!(
            "{:<12} {:<10} {:<9} {:<14} {:<16} {:<11} {:<19} {}",
            n.name,
            n.state,
            if n.connected { "connected" } else { "away" },
            version,
            n.address.as_deref().unwrap_or("-"),
            ago(n.last_heard),
            at(n.cert_expires),
            n.health.as_deref().unwrap_or("ok"),
        );
    }
}

pub fn explain(conn: &ConnectArgs, id: u64, json: bool) -> Result<ExitCode> {
    let x: ExplainView = conn.client()?.get(&format!("/jobs/{id}/explain"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&x)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("job {} is {}; reason: {}", x.id, x.state, x.reason);
    if let Some(detail) = &x.detail {
        println!("  {detail}");
    }
    if x.state == JobState::Pending {
        println!("priority {}", x.priority);
        for (name, value) in &x.factors {
            println!("  {name:<10} {value:.4}");
        }
        if x.largest_first_for_gaps {
            println!(
                "job_size favours larger jobs now: the small jobs queued in its partition \
                 could not fill the GPUs its gangs would leave idle (the policy's \
                 largest_first_gaps_percent)"
            );
        } else if x.largest_first {
            println!(
                "job_size favours larger jobs now: its partition's backlog (queued and \
                 running work by time limits) drains within the policy's largest_first_within"
            );
        }
        if x.ends_backlog {
            println!(
                "first in its partition, with a reservation of its own: work has stopped \
                 arriving there and this job would end the backlog last (the policy's \
                 drain_longest_first)"
            );
        } else if let Some(since) = x.starving_since {
            println!(
                "starving: eligible for {}, longer than the policy's starvation_wait: first in \
                 its partition, with a reservation of its own",
                format_duration_short(now_secs().saturating_sub(since))
            );
        }
        match x.expected_start {
            Some(t) => println!(
                "expected to start in {} (backfill reservation)",
                format_duration_short(t.saturating_sub(now_secs()))
            ),
            None => println!("no planned start yet"),
        }
        for (node, why) in &x.nodes {
            println!("  {node}: {why}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn cancel(conn: &ConnectArgs, ids: &[u64]) -> Result<ExitCode> {
    let mut client = conn.client()?;
    let mut failed = false;
    for id in ids {
        if let Err(e) =
            client.send::<(), serde_json::Value>(Method::DELETE, &format!("/jobs/{id}"), None)
        {
            eprintln!("cadre: error: {e}");
            failed = true;
        }
    }
    Ok(if failed {
        ExitCode::from(exit::ERROR)
    } else {
        ExitCode::SUCCESS
    })
}

/// `cadre wait`: until every job has ended; exit 0 if all completed.
pub fn wait(conn: &ConnectArgs, ids: &[u64], timeout: Option<u64>) -> Result<ExitCode> {
    let mut client = conn.client()?;
    let deadline = timeout.map(|t| Instant::now() + Duration::from_secs(t));
    let mut all_ok = true;
    for &id in ids {
        loop {
            let j: JobView = client.get(&format!("/jobs/{id}"))?;
            if j.state.is_final() {
                println!("job {id} {}", j.state);
                all_ok &= j.state == JobState::Completed;
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                anyhow::bail!("job {id} is still {} after the timeout", j.state);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::JOB_NOT_COMPLETED)
    })
}

pub fn token(conn: &ConnectArgs, cmd: &TokenCommand) -> Result<ExitCode> {
    let mut client = conn.client()?;
    match cmd {
        TokenCommand::Create { user, admin, json } => {
            let t: TokenView = client.send(
                Method::POST,
                "/tokens",
                Some(&TokenRequest {
                    user: user.clone(),
                    admin: *admin,
                }),
            )?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                println!("{}", t.token.context("the controller returned no secret")?);
                eprintln!(
                    "token {} for user `{}`{}: shown once; clients send it as `Authorization: Bearer <token>` (CADRE_TOKEN)",
                    t.id,
                    t.user,
                    if t.admin { " (administrator)" } else { "" }
                );
            }
        }
        TokenCommand::List { json } => {
            let list: TokenList = client.get("/tokens")?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("{:>4} {:<16} {:<6} {:<8}", "ID", "USER", "ADMIN", "STATE");
                for t in list.tokens {
                    println!(
                        "{:>4} {:<16} {:<6} {:<8}",
                        t.id,
                        t.user,
                        if t.admin { "yes" } else { "no" },
                        if t.revoked.is_some() {
                            "revoked"
                        } else {
                            "active"
                        }
                    );
                }
            }
        }
        TokenCommand::Revoke { id } => {
            client.send::<(), serde_json::Value>(Method::DELETE, &format!("/tokens/{id}"), None)?;
            println!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn node(conn: &ConnectArgs, cmd: &NodeCommand) -> Result<ExitCode> {
    let mut client = conn.client()?;
    match cmd {
        NodeCommand::Token(JoinTokenCommand::Create { node, ttl, json }) => {
            let ttl_secs = ttl
                .as_deref()
                .map(|t| parse_ttl(t).with_context(|| format!("--ttl `{t}`")))
                .transpose()?;
            let t: JoinTokenView = client.send(
                Method::POST,
                "/nodes/join-tokens",
                Some(&JoinTokenRequest {
                    node: node.clone(),
                    ttl_secs,
                }),
            )?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                println!("{}", t.token);
                eprintln!(
                    "join token for {}, valid for {}: shown once; give it to the agent in a file (cadre agent --join-file FILE) or in CADRE_JOIN_TOKEN",
                    t.node
                        .as_deref()
                        .map_or_else(|| "any node".to_string(), |n| format!("node `{n}`")),
                    format_duration_short(t.expires_at.saturating_sub(cadre_client::clock::now()))
                );
            }
        }
        NodeCommand::Revoke { node } => {
            let r: RevokeResponse =
                client.send::<(), _>(Method::POST, &format!("/nodes/{node}/revoke"), None)?;
            println!(
                "node `{}`: {} certificate{} revoked",
                r.node,
                r.revoked,
                if r.revoked == 1 { "" } else { "s" }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A token's lifetime: `30m`, `2h`, `45s`, `7d`, or Slurm's time syntax.
fn parse_ttl(text: &str) -> Result<u64> {
    let unit = |suffix: char, secs: u64| {
        text.strip_suffix(suffix)
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| n.checked_mul(secs))
    };
    if let Some(secs) = unit('s', 1)
        .or_else(|| unit('m', 60))
        .or_else(|| unit('h', 3600))
        .or_else(|| unit('d', 86_400))
    {
        return Ok(secs);
    }
    match cadre_core::time::parse_slurm_duration(text) {
        Ok(Some(d)) if d.0 > 0 => Ok(d.0),
        Ok(_) => anyhow::bail!("a join token's lifetime is finite and not zero"),
        Err(e) => anyhow::bail!("{e}; or give 30s, 30m, 2h, 7d"),
    }
}

/// `cadre ui`.
#[derive(Args, Debug, Clone)]
pub struct UiArgs {
    /// The address to put in the link, as the browser reaches the controller
    /// (`https://head-node:6817`); default: the `--server` address when it is one, else the
    /// controller's `--listen` address (this machine's name for a wildcard one).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Print the link and its expiry as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `cadre status`: what each controller of the target is.
pub fn status(conn: &ConnectArgs, json: bool) -> Result<ExitCode> {
    use cadre_proto::api::ControllerStatus;
    let mut rows: Vec<(String, std::result::Result<ControllerStatus, String>)> = Vec::new();
    for t in conn.target()?.each() {
        let answer = cadre_client::Client::connect(&t, conn.token.clone())
            .and_then(|mut c| c.get::<ControllerStatus>("/status"))
            .map_err(|e| e.to_string());
        rows.push((t.to_string(), answer));
    }
    let serving = rows.iter().any(|(_, r)| {
        r.as_ref()
            .is_ok_and(|s| s.role == "leader" || s.role == "single")
    });
    if json {
        let all: Vec<serde_json::Value> = rows
            .iter()
            .map(|(at, r)| match r {
                Ok(s) => serde_json::json!({ "address": at, "status": s }),
                Err(e) => serde_json::json!({ "address": at, "error": e }),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        for (at, r) in &rows {
            match r {
                Ok(s) => {
                    let leader = s.leader.as_ref().map_or_else(
                        || "no leader now".to_string(),
                        |l| {
                            let now = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .map_or(0, |d| d.as_secs());
                            format!(
                                "leader {} at {}, epoch {}, leading for {}",
                                l.name,
                                l.address,
                                l.epoch,
                                cadre_core::time::format_duration(now.saturating_sub(l.since))
                            )
                        },
                    );
                    match s.role.as_str() {
                        "single" => println!("{at}: the controller (cadre {})", s.version),
                        role => println!(
                            "{at}: {role} {} (cadre {}); {leader}",
                            s.replica.as_deref().unwrap_or("?"),
                            s.version
                        ),
                    }
                }
                Err(e) => println!("{at}: unreachable: {e}"),
            }
        }
    }
    Ok(if serving {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `cadre ui`: a one-time login link to the dashboard for the current user.
pub fn ui(conn: &ConnectArgs, args: &UiArgs) -> Result<ExitCode> {
    let mut client = conn.client()?;
    let link: UiLinkView = client.send::<(), _>(Method::POST, "/ui/links", None)?;
    // The controller that made the link (the leader, of replicated ones).
    let target = client.target().clone();
    let base = match (&args.url, &target, &link.listen) {
        (Some(url), _, _) => url.trim_end_matches('/').to_owned(),
        (None, Target::Tcp(addr), _) => format!("http://{addr}"),
        (None, Target::Https { authority, .. }, _) => format!("https://{authority}"),
        (None, Target::Unix(_), Some(listen)) => format!(
            "{}://{}",
            if link.tls { "https" } else { "http" },
            browser_address(listen)
        ),
        (None, Target::Any(_), _) | (None, Target::Unix(_), None) => anyhow::bail!(
            "the controller serves the dashboard on its TCP listener, and it has none: start it \
             with `cadre up --listen ADDR` (or `cadre server --listen ADDR`)"
        ),
    };
    let url = format!("{base}{}", link.path);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "url": url,
                "expires": link.expires,
            }))?
        );
    } else {
        println!("{url}");
        eprintln!(
            "open this link in a browser to log in to the dashboard: good once, for five minutes"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A listen address as a browser reaches it: a wildcard address is this machine.
fn browser_address(listen: &str) -> String {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => {
            let host = nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".into());
            format!("{host}:{}", a.port())
        }
        Ok(std::net::SocketAddr::V6(a)) => format!("[{}]:{}", a.ip(), a.port()),
        _ => listen.to_owned(),
    }
}

#[cfg(test)]
mod front_end_time_limits {
    use super::time_limit_arg;
    use cadre_core::time::Dur;
    use cadre_slurm::convert::{Literal, ScriptSource, SubmitContext, build_job, wrap_script};
    use cadre_slurm::sbatch::{parse_command_line, resolve_options};
    use cadre_slurm::time::Clock;

    const CLOCK: Clock = Clock {
        now: 1_795_269_697,
        utc_offset: 0,
    };

    /// `sbatch` with `T` given as `-t T` (`on_command_line`) or as `#SBATCH -t T`: the job
    /// spec's time limit, or `None` if sbatch refuses it.
    fn sbatch_time_limit(t: &str, on_command_line: bool) -> Option<Dur> {
        let (args, script) = if on_command_line {
            (
                vec!["-t".to_string(), t.to_string()],
                "#!/bin/sh\ntrue\n".to_string(),
            )
        } else {
            (Vec::new(), format!("#!/bin/sh\n#SBATCH -t {t}\ntrue\n"))
        };
        let cli = parse_command_line(&args).ok()?;
        let opts = resolve_options(&cli, |_| None, Some(&script), &CLOCK).ok()?;
        let ctx = SubmitContext {
            user: "alice".into(),
            default_account: "alice".into(),
            cwd: "/home/alice".into(),
            env: Vec::new(),
            submit_host: None,
            clock: CLOCK,
            max_array_size: 1001,
        };
        let job = build_job(
            &opts,
            &wrap_script("true"),
            &ScriptSource::Wrap,
            &[],
            &ctx,
            &Literal,
        )
        .ok()?;
        Some(job.submissions[0].spec.time_limit)
    }

    /// Every entry point reads a time limit with the same rules and gets the same limit:
    /// `cadre submit -t`, `sbatch -t`, `#SBATCH -t` and `scontrol update TimeLimit=`
    /// (regression: `cadre submit -t 1-1:60:15` was refused while sbatch took it).
    #[test]
    fn every_front_end_reads_time_limits_alike() {
        const MIN: u64 = 60;
        const DAY: u64 = 86_400;
        // (text, the limit in seconds with 0 for none, or None for refused), as Slurm 22.05
        // reads each (measured with `sbatch -t T` and `scontrol show job`), except where
        // Slurm overflows (noted).
        let table: &[(&str, Option<u64>)] = &[
            ("1-1:60:15", Some(DAY + 121 * MIN)),
            ("0", Some(0)),
            ("0:0", Some(0)),
            ("UNLIMITED", Some(0)),
            ("unlimited", Some(0)),
            ("infinite", Some(0)),
            ("INFINITE", Some(0)),
            ("-1", Some(0)),
            ("1:2:3:4", None),
            ("1-24:00:00", Some(2 * DAY)),
            ("1-25:00", Some(2 * DAY + 60 * MIN)),
            ("60", Some(60 * MIN)),
            ("1:60", Some(2 * MIN)),
            ("1:30", Some(2 * MIN)),
            ("0:30", Some(MIN)),
            ("0:0:1", Some(MIN)),
            ("10:60", Some(11 * MIN)),
            ("1:00:60", Some(61 * MIN)),
            ("1-", Some(DAY)),
            ("0-", Some(0)),
            ("00000000000000000000005", Some(5 * MIN)),
            // Slurm overflows its integers from 35791394 minutes on; cadre keeps the number.
            ("99999999", Some(99_999_999 * MIN)),
            ("4294967294", Some(4_294_967_294 * MIN)),
            ("4294967295", Some(0)),
            ("4294967296", Some(0)),
            // Slurm makes garbage limits of these; cadre refuses them.
            ("-5", None),
            ("99999999999999999999", None),
            ("", None),
            (" 5", None),
            ("5 ", None),
            ("1-2-3", None),
            ("1:", None),
            (":5", None),
            ("+5", None),
            ("1.5", None),
            ("5m", None),
            ("1-1:1:1:1", None),
        ];
        for &(t, want) in table {
            let submit = time_limit_arg(Some(t)).ok().map(|d| d.0);
            let sbatch = sbatch_time_limit(t, true).map(|d| d.0);
            let directive = sbatch_time_limit(t, false).map(|d| d.0);
            let scontrol = cadre_slurm_commands::scontrol::time_limit_value(t, &[], &[]).ok();
            assert_eq!(submit, want, "cadre submit -t {t:?}");
            assert_eq!(sbatch, want, "sbatch -t {t:?}");
            if !t.starts_with(' ') && !t.ends_with(' ') && !t.is_empty() {
                // A directive's words are split on spaces, as in Slurm.
                assert_eq!(directive, want, "#SBATCH -t {t:?}");
            }
            if !t.starts_with(['+', '-']) || t == "-1" {
                // A leading sign is relative in `scontrol update TimeLimit=`.
                assert_eq!(scontrol, want, "scontrol update TimeLimit={t:?}");
            }
        }
        assert_eq!(time_limit_arg(None), Ok(Dur(0)), "no -t is no limit");
    }
}
