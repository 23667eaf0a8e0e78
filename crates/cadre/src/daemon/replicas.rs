//! `cadre up --replicas N`: the replicated form of the controller on one machine, for
//! trying it (in production each replica is a `cadre server --replica` on a host of its
//! own, see docs/replicas.md).
//!
//! **Given** `cadre up`'s settings, a PostgreSQL `--database` and N (2 to
//! [`MAX_LOCAL_REPLICAS`]). **Decided** here: how the replicas and the agents are laid out
//! and kept running. **Must hold**: every replica signs and checks with the same CA and
//! agent key, made once before any replica starts; the agents and the clients of this
//! machine know every replica; nothing is left running after `cadre down`.
//!
//! This process (`cadre up`) supervises: it starts replica I as `cadre up ... --as-replica
//! I` (the same command line, so the same settings), in its own process group, with its
//! pid and log in the data directory (`replica-I.pid`, `replica-I.log`); the replicas share
//! the data directory (the store is PostgreSQL, so only the keys are read from it) and each
//! listens on its own socket in the run directory ([`cadre_client::locate::replica_socket_in`],
//! where clients look for them) and, with `--listen`, on a port of its own. Once one of
//! them leads, it starts the agents with every replica's socket. A replica that exits
//! (killed, to watch a failover) is started again and stands by. Stopped (SIGTERM,
//! `cadre down`), it stops the replicas, then the agents. Replicas and agents still
//! running from an earlier `cadre up` that was killed are adopted.

use super::{
    ControllerArgs, Layout, NodeAgents, alive, ensure_agent, live_pid, local_nodes, log_tail,
    loopback_address, reap, replica_config, server_config, spawn_logged, stop_agents,
    stop_processes, termination,
};
use anyhow::{Context, Result, bail};
use cadre_client::locate::MAX_LOCAL_REPLICAS;
use cadre_client::{Connection, Target};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long a replica that exited waits before it is started again (so that one that
/// cannot start does not spin).
const RESTART_PAUSE: Duration = Duration::from_secs(2);

/// How long `cadre up --replicas` waits for a replica to lead before it gives up.
const FIRST_LEADER_WAIT: Duration = Duration::from_secs(60);

/// Whether `database` names a PostgreSQL database, which replicas need.
pub(super) fn is_postgres(database: &str) -> bool {
    database.starts_with("postgres://") || database.starts_with("postgresql://")
}

/// `--replicas` needs a PostgreSQL `--database`.
pub(super) fn check(args: &ControllerArgs) -> Result<()> {
    match args.database.as_deref() {
        Some(d) if is_postgres(d) => Ok(()),
        _ => bail!(
            "--replicas needs --database postgres://...: replicated controllers share a \
             PostgreSQL database (SQLite serves one controller)"
        ),
    }
}

/// Every replica of `n`, as clients reach them.
pub(super) fn target(layout: &Layout, n: u8) -> Target {
    Target::Any(
        (1..=n)
            .map(|i| Target::Unix(layout.replica_socket(i)))
            .collect(),
    )
}

/// Replica `i`'s `--listen` address: the port's `i-1`-th successor.
fn listen_of(listen: Option<SocketAddr>, i: u8) -> Result<Option<SocketAddr>> {
    let Some(mut addr) = listen else {
        return Ok(None);
    };
    let port = addr
        .port()
        .checked_add(u16::from(i.saturating_sub(1)))
        .with_context(|| {
            format!("--listen {addr}: replica {i} would listen past port 65535; pick a lower port")
        })?;
    addr.set_port(port);
    Ok(Some(addr))
}

/// Replica `i` of `cadre up --replicas` (`--as-replica I`): `cadre server --replica` on
/// its own socket and port.
pub(super) fn serve(args: &ControllerArgs, layout: &Layout, i: u8) -> Result<ExitCode> {
    if !(1..=MAX_LOCAL_REPLICAS).contains(&i) {
        bail!("--as-replica {i}: replicas are numbered 1 to {MAX_LOCAL_REPLICAS}");
    }
    let (mut config, _) = server_config(args, layout)?;
    config.socket = layout.replica_socket(i);
    config.listen = listen_of(args.listen, i)?;
    let replica = replica_config(args, &config)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(cadre_server::replica::serve_replica(
        config,
        replica,
        termination(),
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// A replica this process keeps running.
struct Replica {
    i: u8,
    pid: i32,
    pid_file: PathBuf,
    /// Set when this process started it (not when adopted from an earlier `cadre up`).
    child: Option<std::process::Child>,
    started: Instant,
}

impl Replica {
    fn running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => {
                reap(self.pid);
                alive(self.pid)
            }
        }
    }
}

/// The marker of replica `i` on its command line.
fn marker(i: u8) -> String {
    format!("--as-replica {i}")
}

/// Replica `i`: the one still running from before, or a new one.
fn ensure_replica(layout: &Layout, i: u8) -> Result<Replica> {
    let pid_file = layout.replica(i, "pid");
    if let Some(pid) = live_pid(&pid_file, &["up", &marker(i)]) {
        tracing::info!(replica = i, pid, "adopting the replica still running");
        return Ok(Replica {
            i,
            pid,
            pid_file,
            child: None,
            started: Instant::now(),
        });
    }
    let exe = std::env::current_exe().context("failed to find the cadre executable")?;
    let mut command = std::process::Command::new(exe);
    command
        .args(std::env::args_os().skip(1))
        .arg("--as-replica")
        .arg(i.to_string())
        .env("CADRE_DATA_DIR", &layout.dir)
        .env("CADRE_RUN_DIR", &layout.run);
    let what = format!("replica {i}");
    let (child, pid) = spawn_logged(command, &layout.replica(i, "log"), &pid_file, &what)?;
    tracing::info!(replica = i, pid, "started a controller replica");
    Ok(Replica {
        i,
        pid,
        pid_file,
        child: Some(child),
        started: Instant::now(),
    })
}

/// `cadre up --replicas N`: the replicas and the agents, until SIGTERM or SIGINT.
pub(super) fn run(
    args: &ControllerArgs,
    layout: &Layout,
    n: u8,
    node_agents: &NodeAgents<'_>,
) -> Result<ExitCode> {
    // The agent key and the CA, made here once rather than by replicas racing to.
    let (_, cluster) = server_config(args, layout)?;
    let nodes = local_nodes(&args.cluster, &cluster);
    let mut replicas = Vec::new();
    for i in 1..=n {
        match ensure_replica(layout, i) {
            Ok(r) => replicas.push(r),
            Err(e) => {
                stop_replicas(&replicas);
                return Err(e);
            }
        }
    }
    let target = target(layout, n);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Err(e) = rt.block_on(first_leader(&target, &mut replicas, layout)) {
        stop_replicas(&replicas);
        return Err(e);
    }
    let controllers = (1..=n)
        .map(|i| format!("unix://{}", layout.replica_socket(i).display()))
        .collect::<Vec<_>>()
        .join(",");
    let gpus = args.cluster.gpus_per_node;
    let mut agents = Vec::new();
    let mut spawn_error = None;
    for (k, node) in nodes.iter().enumerate() {
        match ensure_agent(
            layout,
            node,
            &loopback_address(k),
            gpus,
            node_agents,
            &controllers,
        ) {
            Ok(pid) => agents.push((node.clone(), pid)),
            Err(e) => {
                tracing::error!(node, error = %e, "failed to start the node's agent");
                spawn_error = Some(e);
            }
        }
    }
    tracing::info!(nodes = nodes.len(), replicas = n, dir = %layout.dir.display(), "cadre is up");
    rt.block_on(supervise(&mut replicas, layout));
    stop_replicas(&replicas);
    stop_agents(layout, &agents, Duration::from_secs(40));
    match spawn_error {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Waits until a replica serves as the leader (it answers the node list); fails, with the
/// end of their logs, when none does within [`FIRST_LEADER_WAIT`].
async fn first_leader(target: &Target, replicas: &mut [Replica], layout: &Layout) -> Result<()> {
    let deadline = Instant::now() + FIRST_LEADER_WAIT;
    loop {
        if let Ok(mut c) = Connection::open(target, None).await
            && c.call::<(), cadre_proto::api::NodeList>(hyper::Method::GET, "/nodes", None)
                .await
                .is_ok()
        {
            return Ok(());
        }
        let stopped: Vec<u8> = replicas
            .iter_mut()
            .filter_map(|r| (!r.running()).then_some(r.i))
            .collect();
        if stopped.len() == replicas.len() || Instant::now() >= deadline {
            let logs: Vec<String> = replicas
                .iter()
                .map(|r| {
                    let path = layout.replica(r.i, "log");
                    format!("{}:\n{}", path.display(), log_tail(&path, 3))
                })
                .collect();
            bail!(
                "no controller replica {}; the end of their logs:\n{}",
                if stopped.len() == replicas.len() {
                    "is running (each stopped)".to_owned()
                } else {
                    format!("took the lead within {} s", FIRST_LEADER_WAIT.as_secs())
                },
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Keeps the replicas running until SIGTERM or SIGINT: one that exited is started again
/// (after [`RESTART_PAUSE`] since it last started) and stands by.
async fn supervise(replicas: &mut [Replica], layout: &Layout) {
    let stop = termination();
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        for r in replicas.iter_mut() {
            if r.running() || r.started.elapsed() < RESTART_PAUSE {
                continue;
            }
            tracing::warn!(
                replica = r.i,
                pid = r.pid,
                "a controller replica stopped; starting it again"
            );
            match ensure_replica(layout, r.i) {
                Ok(new) => *r = new,
                Err(e) => {
                    tracing::error!(replica = r.i, error = %e, "failed to start the replica again");
                    r.started = Instant::now();
                }
            }
        }
    }
}

fn stop_replicas(replicas: &[Replica]) {
    let processes: Vec<(PathBuf, i32)> = replicas
        .iter()
        .map(|r| (r.pid_file.clone(), r.pid))
        .collect();
    stop_processes(&processes, Duration::from_secs(40));
}

/// Replicas still running from a `cadre up --replicas` that was killed, with their pid
/// files (for `cadre down`).
pub(super) fn left_running(layout: &Layout) -> Vec<(PathBuf, i32)> {
    (1..=MAX_LOCAL_REPLICAS)
        .filter_map(|i| {
            let pid_file = layout.replica(i, "pid");
            let pid = live_pid(&pid_file, &["up", &marker(i)]);
            if pid.is_none() {
                let _ = std::fs::remove_file(&pid_file);
            }
            pid.map(|pid| (pid_file, pid))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::listen_of;

    #[test]
    fn each_replica_listens_on_a_port_of_its_own() {
        let addr = "127.0.0.1:6817".parse().ok();
        assert_eq!(listen_of(addr, 1).unwrap(), addr);
        assert_eq!(listen_of(addr, 3).unwrap(), "127.0.0.1:6819".parse().ok());
        assert_eq!(listen_of(None, 2).unwrap(), None);
        let err = listen_of("127.0.0.1:65535".parse().ok(), 2).unwrap_err();
        assert!(format!("{err:#}").contains("past port 65535"), "{err:#}");
    }
}
