//! Job steps: `srun` inside a running job's allocation.
//!
//! **Given** a step request (what to run, how many nodes and tasks, output patterns) for a
//! running job. **Decided** here: the step's number (0, 1, ... per job, never reused, also
//! across restarts and requeues), its tasks laid out within the job's allocation
//! ([`step_layout`]), and its end: a step is launched on its nodes as a run of its own
//! (`RunRef::step`), ends when every node's tasks have ended (its state the worst node's,
//! its exit code the highest), and is stopped when its job stops or ends.
//! **Must hold**: a step's tasks only use what its job holds (cores, GPUs and memory of the
//! job on each node); a step's start is committed before any agent is told of it, and its
//! end before its `srun` is; a step outlives neither its job nor a controller restart's
//! reconciliation (runs the agents no longer have end as NODE_FAIL).
//!
//! Output: a step without output files has its tasks' output relayed by its agents to the
//! controller, which passes it to the `srun` that asked for the step through the [`IoHub`]
//! without going through the engine thread. It is not kept anywhere: output produced while
//! nobody listens (the controller restarting, `srun` gone) is lost, the step's end is not.
//!
//! [`IoHub`]: crate::engine::IoHub

use super::run::{RunTrack, severity};
use super::{Comm, Controller};
use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::limits::{LimitError, MAX_TIME_LIMIT_SECS};
use cadre_core::alloc::{Allocation, TaskAlloc};
use cadre_core::cluster::NodeId;
use cadre_core::hostlist;
use cadre_core::job::{JobId, JobState};
use cadre_core::run::{Export, OpenMode, RunSpec};
use cadre_core::time::Time;
use cadre_proto::agent::{ControllerMessage, LaunchOrder, RunRef, StepContext, TaskEvent};
use cadre_proto::api::{ErrorCode, StepEvent, StepRequest, StepView};
use cadre_store::StepRecord;
use std::collections::BTreeSet;

/// One step being followed.
#[derive(Clone, Debug)]
pub(crate) struct StepTrack {
    /// The job's run the step belongs to.
    pub(crate) run: u32,
    pub(crate) record: StepRecord,
    /// Nodes whose tasks of the step have not ended yet.
    pub(crate) nodes_left: BTreeSet<NodeId>,
    pub(crate) outcome: JobState,
    pub(crate) exit_code: Option<i32>,
    /// A stop was asked: resent to agents that reconnect with the step alive.
    pub(crate) stop: Option<u64>,
    /// Why the step was stopped or failed, for its `srun`.
    pub(crate) reason: Option<String>,
}

impl StepTrack {
    fn key(&self) -> RunRef {
        RunRef {
            job: self.record.job,
            run: self.run,
            step: Some(self.record.step),
        }
    }
}

/// The job's fields a step view repeats.
pub(crate) struct StepJob<'a> {
    pub user: &'a str,
    pub account: &'a str,
    pub partition: &'a str,
    pub time_limit: u64,
}

/// A step as the API shows it.
pub(crate) fn step_view(rec: &StepRecord, job: &StepJob<'_>) -> StepView {
    StepView {
        job: rec.job,
        step: rec.step,
        name: rec.name.clone(),
        user: job.user.to_owned(),
        account: job.account.to_owned(),
        partition: job.partition.to_owned(),
        state: rec.state,
        num_nodes: hostlist::expand(&rec.nodes).map_or(0, |n| n.len() as u32),
        nodes: rec.nodes.clone(),
        ntasks: rec.ntasks,
        cpus: rec.cpus,
        start_time: rec.start_time.0,
        end_time: rec.end_time.map(|t| t.0),
        exit_code: rec.exit_code,
        command: rec.command.clone(),
        time_limit: job.time_limit,
    }
}

/// Block distribution of `n` tasks over `nodes` nodes: the first nodes get one more.
fn block(n: u32, nodes: usize) -> Vec<u32> {
    let nodes = nodes.max(1) as u32;
    let (base, rem) = (n / nodes, n % nodes);
    (0..nodes).map(|i| base + u32::from(i < rem)).collect()
}

/// The step's tasks within the job's allocation, or why the request cannot be laid out.
/// `name_of` gives a node's name, `id_of` a name's node.
///
/// Nodes: `nodelist`'s, else the first `nodes` of the job's (in node order), else all of
/// them. Tasks: `ntasks`, else `ntasks_per_node` on each, else the job's own tasks on those
/// nodes; never more nodes than tasks (the last nodes are dropped, as Slurm does). Tasks
/// are spread in blocks (the first nodes get one more). On each node the job's cores are
/// divided among the step's tasks there (`cpus_per_task` each, default an equal share),
/// as is its memory; its GPUs are divided `gpus_per_task` each, or else every task sees all
/// of them.
///
/// Every count is checked against what the job holds before anything is sized by it: a
/// task needs one of the job's CPUs at least, so no step has more tasks than the job has
/// CPUs on the step's nodes; products are computed in 64 bits.
pub(crate) fn step_layout(
    job_id: JobId,
    job: &Allocation,
    name_of: &dyn Fn(NodeId) -> String,
    id_of: &dyn Fn(&str) -> Option<NodeId>,
    req: &StepRequest,
) -> Result<Allocation, String> {
    let job_nodes = job.nodes();
    let all_names: Vec<String> = job_nodes.iter().map(|&n| name_of(n)).collect();
    let held = || hostlist::compress(&all_names);
    let mut nodes: Vec<NodeId> = match &req.nodelist {
        Some(list) => {
            let names = hostlist::expand(list).map_err(|e| format!("--nodelist `{list}`: {e}"))?;
            let mut ids = Vec::with_capacity(names.len());
            for name in names {
                match id_of(&name).filter(|id| job_nodes.contains(id)) {
                    Some(id) => ids.push(id),
                    None => {
                        return Err(format!(
                            "node {name} is not allocated to job {job_id} (its nodes are {})",
                            held()
                        ));
                    }
                }
            }
            ids.sort_unstable();
            ids.dedup();
            ids
        }
        None => job_nodes.clone(),
    };
    if let Some(n) = req.nodes {
        if n == 0 {
            return Err("--nodes must be at least 1".into());
        }
        if n as usize > nodes.len() {
            return Err(format!(
                "only {} node(s) are allocated to job {job_id} ({}), the step asks for {n}",
                nodes.len(),
                held()
            ));
        }
        if req.nodelist.is_some() && n as usize != nodes.len() {
            return Err(format!(
                "--nodes={n} does not match --nodelist's {} node(s)",
                nodes.len()
            ));
        }
        nodes.truncate(n as usize);
    }
    let job_tasks_on = |node: NodeId| job.tasks.iter().filter(|t| t.node == node).count() as u64;
    let cores_on = |node: NodeId| -> Vec<u32> {
        let mut cores: Vec<u32> = job
            .tasks
            .iter()
            .filter(|t| t.node == node)
            .flat_map(|t| t.cores.iter().copied())
            .collect();
        cores.sort_unstable();
        cores.dedup();
        cores
    };
    let node_count = nodes.len() as u64;
    let (ntasks, field) = match (req.ntasks, req.ntasks_per_node) {
        (Some(0), _) | (_, Some(0)) => return Err("the task count must be at least 1".into()),
        (Some(n), _) => (u64::from(n), "ntasks"),
        // At most 2^32 per node times 2^20 nodes (a hostlist's most): no overflow.
        (None, Some(per)) => (u64::from(per) * node_count, "ntasks_per_node"),
        (None, None) => (
            nodes.iter().map(|&n| job_tasks_on(n)).sum::<u64>().max(1),
            "ntasks",
        ),
    };
    // Each task needs one of the job's CPUs at least: what bounds every count below.
    let cpus_held: u64 = nodes.iter().map(|&n| cores_on(n).len() as u64).sum();
    if ntasks > cpus_held {
        let value = match (field, req.ntasks_per_node) {
            ("ntasks_per_node", Some(per)) => u64::from(per),
            _ => ntasks,
        };
        let bound = if field == "ntasks" {
            cpus_held
        } else {
            cpus_held / node_count.max(1)
        };
        return Err(format!(
            "{field} = {value} is out of range: at most {bound}, as job {job_id} holds {cpus_held} CPU(s) on the step's {node_count} node(s) and each task needs one"
        ));
    }
    let ntasks = u32::try_from(ntasks).map_err(|_| format!("{field}: {ntasks} tasks"))?;
    if (ntasks as usize) < nodes.len() {
        nodes.truncate(ntasks as usize);
    }
    let counts = match req.ntasks_per_node {
        Some(per) if u64::from(per) * (nodes.len() as u64) < u64::from(ntasks) => {
            return Err(format!(
                "{ntasks} tasks do not fit {per} per node on {} node(s)",
                nodes.len()
            ));
        }
        _ => block(ntasks, nodes.len()),
    };
    if req.cpus_per_task == Some(0) {
        return Err("--cpus-per-task must be at least 1".into());
    }
    // Checked on every node before any task is made.
    let mut shares = Vec::with_capacity(nodes.len());
    for (&node, &k) in nodes.iter().zip(&counts) {
        let mine: Vec<&TaskAlloc> = job.tasks.iter().filter(|t| t.node == node).collect();
        let cores = cores_on(node);
        let gpus: Vec<u32> = mine.iter().flat_map(|t| t.gpus.iter().copied()).collect();
        let name = name_of(node);
        let per_task_cpus = match req.cpus_per_task {
            Some(c) => u64::from(c),
            None => (cores.len() as u64 / u64::from(k)).max(1),
        };
        if per_task_cpus * u64::from(k) > cores.len() as u64 {
            return Err(format!(
                "{k} task(s) of {per_task_cpus} CPU(s) do not fit in job {job_id}'s {} CPU(s) on {name}",
                cores.len()
            ));
        }
        if let Some(g) = req.gpus_per_task
            && u64::from(g) * u64::from(k) > gpus.len() as u64
        {
            return Err(format!(
                "{k} task(s) of {g} GPU(s) do not fit in job {job_id}'s {} GPU(s) on {name}",
                gpus.len()
            ));
        }
        // Both fit in the job's cores: no larger than a usize.
        shares.push((node, k as usize, mine, cores, gpus, per_task_cpus as usize));
    }
    let mut tasks = Vec::with_capacity(ntasks as usize);
    let mut rank = 0u32;
    for (node, k, mine, cores, gpus, per_task_cpus) in shares {
        let nics: Vec<u32> = mine.iter().flat_map(|t| t.nics.iter().copied()).collect();
        let mem: u64 = mine.iter().map(|t| t.mem_mib).sum();
        let gpu_milli_each = mine.first().map_or(1000, |t| t.gpu_milli_each);
        for i in 0..k {
            let task_gpus = match req.gpus_per_task {
                Some(g) => gpus[i * g as usize..(i + 1) * g as usize].to_vec(),
                None => gpus.clone(),
            };
            tasks.push(TaskAlloc {
                group: 0,
                rank,
                node,
                cores: cores[i * per_task_cpus..(i + 1) * per_task_cpus].to_vec(),
                gpus: task_gpus,
                gpu_milli_each,
                nics: nics.clone(),
                mem_mib: mem / k as u64,
                named: Vec::new(),
            });
            rank += 1;
        }
    }
    Ok(Allocation {
        tasks,
        exclusive: job.exclusive,
    })
}

fn forbidden(who: &Principal, owner: &str, id: JobId) -> Option<ApiError> {
    (owner != who.user && !who.admin).then(|| {
        ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "job {id} belongs to user `{owner}`; `{}` may not use it",
                who.user
            ),
        )
    })
}

impl Controller {
    /// The next step number of a job (continuing after the steps it has in the store).
    fn next_step(&mut self, c: &mut dyn Comm, id: JobId) -> Result<u32, ApiError> {
        if let Some(n) = self.next_steps.get(&id) {
            return Ok(*n);
        }
        let stored = c.stored_steps(id).map_err(|e| self.failed_read(e))?;
        Ok(stored
            .iter()
            .filter(|s| s.step != cadre_proto::api::BATCH_STEP)
            .map(|s| s.step + 1)
            .max()
            .unwrap_or(0))
    }

    /// Creates a step in a running job and launches it (after the commit). Its events go
    /// to `io`.
    pub(super) fn step_create(
        &mut self,
        c: &mut dyn Comm,
        who: &Principal,
        id: JobId,
        req: &StepRequest,
        now: Time,
    ) -> Result<StepView, ApiError> {
        let (owner, live) = self.owner(c, id)?;
        if let Some(e) = forbidden(who, &owner, id) {
            return Err(e);
        }
        let Some(track) = self.runs.get(&id) else {
            let state = live.map_or_else(|| "over".to_string(), |s| s.to_string());
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("job {id} is {state}; steps run only in a running job's allocation"),
            ));
        };
        if track.stop().is_some() || track.settled().is_some() {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("job {id} is ending; no new step can start in it"),
            ));
        }
        let (program, _) = req
            .command
            .split_first()
            .ok_or_else(|| ApiError::new(ErrorCode::InvalidRequest, "the step has no command"))?;
        if program.is_empty() {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "the step's program name is empty",
            ));
        }
        let work_dir = std::path::PathBuf::from(&req.work_dir);
        if !work_dir.is_absolute() {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "the working directory `{}` is not an absolute path",
                    req.work_dir
                ),
            ));
        }
        if let Some(t) = req.time_limit
            && t > MAX_TIME_LIMIT_SECS
        {
            return Err(LimitError::new(
                "time_limit",
                t,
                format!("at most {MAX_TIME_LIMIT_SECS} seconds"),
            )
            .answer(""));
        }
        let cluster = self.sched.cluster();
        let allocation = step_layout(
            id,
            &track.allocation,
            &|n| cluster.node(n).name.clone(),
            &|name| cluster.node_id(name),
            req,
        )
        .map_err(|why| ApiError::new(ErrorCode::InvalidRequest, why))?;
        if let Some(h) = req
            .hostname
            .as_deref()
            .filter(|h| !cadre_proto::api::is_step_hostname(h))
        {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "hostname `{h}`: a step's host name is letters, digits, `-` and `.`, at most 63"
                ),
            ));
        }
        if let Some(rank) = req.in_task {
            let placed = track.allocation.task_of_procid(rank);
            let here = allocation.tasks.first().map(|t| t.node);
            match placed {
                Some(t) if allocation.tasks.len() == 1 && Some(t.node) == here => {}
                Some(t) => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "a step inside task {rank}'s container is one task on its node, {}",
                            cluster.node(t.node).name
                        ),
                    ));
                }
                None => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "job {id} has no task {rank} ({} tasks)",
                            track.allocation.tasks.len()
                        ),
                    ));
                }
            }
        }
        let run = track.run;
        let start_time = track.start_time;
        let job_nodes = track.allocation.nodes();
        let job_names: Vec<&str> = job_nodes.iter().map(|&n| self.node_name(n)).collect();
        let job_cpus: Vec<u64> = job_nodes
            .iter()
            .map(|&n| {
                track
                    .allocation
                    .tasks
                    .iter()
                    .filter(|t| t.node == n)
                    .map(|t| t.cores.len() as u64)
                    .sum()
            })
            .collect();
        let context = StepContext {
            job_nodelist: hostlist::compress(&job_names),
            job_num_nodes: job_nodes.len() as u32,
            job_cpus_per_node: cadre_core::hostlist::compress_counts(&job_cpus),
            relay: req.stdout.is_none(),
            in_task: req.in_task,
            leftovers_outlive: req.leftovers_outlive,
            hostname: req.hostname.clone(),
        };
        let Some(job) = self.sched.job(id) else {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                format!("job {id} is gone"),
            ));
        };
        let spec = job.spec.clone();
        let partition = self.sched.cluster().partition(job.partition).name.clone();
        // What is left of the job's time, bounded by the step's own limit; in whole
        // seconds, rounded in the step's favour (a second more at most), so that the step
        // never ends before its job's limit (see `Controller::retime`).
        let left_ms = (spec.time_limit.0 > 0).then(|| {
            start_time
                .0
                .saturating_add(spec.time_limit.0)
                .saturating_add(1)
                .saturating_sub(now.0)
                .saturating_mul(1000)
        });
        let time_limit_ms = match (left_ms, req.time_limit) {
            (Some(l), Some(t)) => Some(l.min(t * 1000)),
            (l, t) => l.or(t.map(|t| t * 1000)),
        };
        let nodes = allocation.nodes();
        // After a controller's restart or failover the agents come back within moments: a
        // step on a node whose agent is not connected is refused as unavailable, which
        // clients send again, rather than started to fail on that node at once.
        if let Some(&away) = nodes.iter().find(|&&n| !self.is_connected(n)) {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "the agent of node {} is not connected (agents reconnect after the \
                     controller restarts or fails over): try again in a moment",
                    self.node_name(away)
                ),
            ));
        }
        let step = self.next_step(c, id)?;
        self.next_steps.insert(id, step + 1);
        let names: Vec<&str> = nodes.iter().map(|&n| self.node_name(n)).collect();
        let name = req.name.clone().unwrap_or_else(|| {
            std::path::Path::new(program)
                .file_name()
                .map_or_else(|| program.clone(), |f| f.to_string_lossy().into_owned())
        });
        let record = StepRecord {
            job: id,
            step,
            name,
            state: JobState::Running,
            nodes: hostlist::compress(&names),
            ntasks: allocation.tasks.len() as u32,
            cpus: allocation
                .nodes()
                .iter()
                .map(|&n| {
                    let mut c: Vec<u32> = allocation
                        .tasks
                        .iter()
                        .filter(|t| t.node == n)
                        .flat_map(|t| t.cores.iter().copied())
                        .collect();
                    c.sort_unstable();
                    c.dedup();
                    c.len() as u64
                })
                .sum(),
            start_time: now,
            end_time: None,
            exit_code: None,
            command: req.command.join(" "),
        };
        let run_spec = RunSpec {
            stdout: req.stdout.clone(),
            stderr: req.stderr.clone(),
            open_mode: OpenMode::Append,
            export: Export::All,
            env: req.env.clone(),
            ..RunSpec::command(req.command.clone(), work_dir)
        };
        let run_ref = RunRef {
            job: id,
            run,
            step: Some(step),
        };
        let (node_names, node_addresses) = self.names_and_addresses(&nodes);
        let job_token = self.job_token(RunRef::job_run(id, run));
        let order = LaunchOrder {
            run: run_ref,
            spec: spec.clone(),
            partition: partition.clone(),
            allocation,
            node_names,
            node_addresses,
            run_spec,
            time_limit_ms,
            step: Some(context),
            job_token,
            claims: Vec::new(),
            host_paths: Vec::new(),
        };
        let view = step_view(
            &record,
            &StepJob {
                user: &spec.user,
                account: &spec.account,
                partition: &partition,
                time_limit: spec.time_limit.0,
            },
        );
        let st = StepTrack {
            run,
            record: record.clone(),
            nodes_left: nodes.iter().copied().collect(),
            outcome: JobState::Completed,
            exit_code: None,
            stop: None,
            reason: None,
        };
        for &node in &nodes {
            self.outgoing
                .push((node, ControllerMessage::Launch(Box::new(order.clone()))));
        }
        self.tx.steps.push(record);
        tracing::info!(job = %id, step, nodes = %st.record.nodes, tasks = st.record.ntasks, "step created");
        self.steps.insert((id, step), st);
        Ok(view)
    }

    /// Cancels a step (or sends it a signal).
    pub(super) fn step_cancel(
        &mut self,
        c: &mut dyn Comm,
        who: &Principal,
        id: JobId,
        step: u32,
        signal: Option<i32>,
    ) -> Result<(), ApiError> {
        let (owner, _) = self.owner(c, id)?;
        if let Some(e) = forbidden(who, &owner, id) {
            return Err(e);
        }
        let Some(st) = self.steps.get(&(id, step)) else {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("step {id}.{step} is not running"),
            ));
        };
        let run = st.key();
        match signal {
            Some(signal) => {
                for &node in &st.nodes_left {
                    self.outgoing
                        .push((node, ControllerMessage::Signal { run, signal }));
                }
            }
            None => self.stop_step(
                id,
                step,
                "cancelled",
                cadre_core::run::DEFAULT_KILL_WAIT_SECS,
            ),
        }
        Ok(())
    }

    /// Stops one step's tasks on every node where they still run.
    fn stop_step(&mut self, id: JobId, step: u32, why: &str, kill_wait_secs: u64) {
        let Some(st) = self.steps.get_mut(&(id, step)) else {
            return;
        };
        if st.stop.is_some() {
            return;
        }
        st.stop = Some(kill_wait_secs);
        st.reason.get_or_insert_with(|| why.to_owned());
        st.outcome = JobState::Cancelled;
        let run = st.key();
        let nodes: Vec<NodeId> = st.nodes_left.iter().copied().collect();
        self.send_stop(run, nodes, kill_wait_secs);
    }

    /// The job is being stopped: so are its steps.
    pub(super) fn stop_steps(&mut self, id: JobId, kill_wait_secs: u64) {
        let mine: Vec<u32> = self.steps_of(id);
        for step in mine {
            self.stop_step(id, step, "its job was stopped", kill_wait_secs);
        }
    }

    fn steps_of(&self, id: JobId) -> Vec<u32> {
        self.steps
            .range((id, 0)..=(id, u32::MAX))
            .map(|(&(_, s), _)| s)
            .collect()
    }

    /// The job's run is over: steps still followed end now (their agents were told to
    /// stop them; what they say later no longer counts).
    pub(super) fn end_steps(&mut self, id: JobId, now: Time) {
        for step in self.steps_of(id) {
            if let Some(st) = self.steps.get_mut(&(id, step)) {
                st.reason.get_or_insert_with(|| "its job ended".into());
                st.outcome = JobState::Cancelled;
                let run = st.key();
                let nodes = std::mem::take(&mut st.nodes_left);
                self.send_stop(run, nodes, 1);
            }
            self.finish_step(id, step, now);
        }
        self.next_steps.remove(&id);
    }

    /// A step's event from an agent.
    pub(super) fn step_event(&mut self, node: NodeId, run: RunRef, event: TaskEvent, now: Time) {
        let Some(step) = run.step else {
            return;
        };
        let current = self
            .steps
            .get(&(run.job, step))
            .is_some_and(|s| s.run == run.run && s.nodes_left.contains(&node));
        if !current {
            tracing::debug!(job = %run.job, step, "event of a step that is over: ignored");
            return;
        }
        match event {
            TaskEvent::Started { .. } | TaskEvent::Completing { .. } => {}
            TaskEvent::LaunchFailed { reason, .. } => {
                let msg = format!("launch failed on {}: {reason}", self.node_name(node));
                tracing::warn!(job = %run.job, step, %msg, "step launch failed");
                if let Some(st) = self.steps.get_mut(&(run.job, step)) {
                    st.reason.get_or_insert(msg);
                }
                self.stop_step(run.job, step, "launch failed", 1);
                self.step_node_done(run.job, step, node, JobState::Failed, None, now);
            }
            TaskEvent::Ended {
                state, exit_code, ..
            } => self.step_node_done(run.job, step, node, state, exit_code, now),
        }
    }

    fn step_node_done(
        &mut self,
        id: JobId,
        step: u32,
        node: NodeId,
        state: JobState,
        exit_code: Option<i32>,
        now: Time,
    ) {
        let Some(st) = self.steps.get_mut(&(id, step)) else {
            return;
        };
        if !st.nodes_left.remove(&node) {
            return;
        }
        if severity(state) > severity(st.outcome) {
            st.outcome = state;
        }
        if let Some(c) = exit_code {
            st.exit_code = Some(st.exit_code.map_or(c, |old| old.max(c)));
        }
        if st.nodes_left.is_empty() {
            self.finish_step(id, step, now);
        }
    }

    /// Records the step's end and tells its `srun` once that is committed.
    fn finish_step(&mut self, id: JobId, step: u32, now: Time) {
        let Some(mut st) = self.steps.remove(&(id, step)) else {
            return;
        };
        st.record.state = st.outcome;
        st.record.end_time = Some(now);
        st.record.exit_code = st.exit_code;
        tracing::info!(job = %id, step, state = %st.outcome, exit_code = ?st.exit_code, "step ended");
        self.tx.steps.push(st.record.clone());
        let event = StepEvent::Ended {
            state: st.outcome,
            exit_code: st.exit_code,
            reason: st.reason,
        };
        self.step_ends.push((id, step, event));
    }

    /// A reconnecting agent's steps: those it still runs are kept (and stopped again if a
    /// stop was asked), those it lost end as NODE_FAIL there, those the controller does
    /// not follow are stopped.
    pub(super) fn reconcile_steps(&mut self, node: NodeId, alive: &BTreeSet<RunRef>, now: Time) {
        let mine: Vec<(JobId, u32, RunRef, Option<u64>)> = self
            .steps
            .iter()
            .filter(|(_, s)| s.nodes_left.contains(&node))
            .map(|(&(j, s), st)| (j, s, st.key(), st.stop))
            .collect();
        for (job, step, key, stop) in mine {
            if alive.contains(&key) {
                if let Some(kill_wait_secs) = stop {
                    self.send_stop(key, [node], kill_wait_secs);
                }
            } else {
                tracing::warn!(job = %job, step, node = %self.node_name(node), "step's tasks are gone from the node");
                if let Some(st) = self.steps.get_mut(&(job, step)) {
                    st.reason
                        .get_or_insert_with(|| "its tasks were lost on a node".into());
                }
                self.step_node_done(job, step, node, JobState::NodeFail, None, now);
            }
        }
        for r in alive.iter().filter(|r| r.step.is_some()) {
            let step = r.step.unwrap_or_default();
            let followed = self
                .steps
                .get(&(r.job, step))
                .is_some_and(|s| s.run == r.run && s.nodes_left.contains(&node));
            if !followed {
                tracing::warn!(run = %r, node = %self.node_name(node), "agent runs a step the controller does not follow: stopping it");
                self.send_stop(*r, [node], 1);
            }
        }
    }

    /// After a restart: the steps the store says run, followed again if their job runs
    /// (reconnecting agents then keep or end them), ended otherwise.
    pub(super) fn recover_steps(&mut self, unfinished: Vec<StepRecord>, now: Time) {
        for rec in unfinished {
            let (job, step) = (rec.job, rec.step);
            if step == cadre_proto::api::BATCH_STEP
                && let Some(t) = self.runs.get_mut(&job)
            {
                // The batch step ends with its job's run.
                t.batch_step = Some(rec);
                continue;
            }
            let run: Option<&RunTrack> = self.runs.get(&job);
            let nodes: Option<BTreeSet<NodeId>> = hostlist::expand(&rec.nodes).ok().map(|names| {
                names
                    .iter()
                    .filter_map(|n| self.sched.cluster().node_id(n))
                    .collect()
            });
            match (run, nodes) {
                (Some(t), Some(nodes)) if !nodes.is_empty() => {
                    let run = t.run;
                    self.steps.insert(
                        (job, step),
                        StepTrack {
                            run,
                            record: rec,
                            nodes_left: nodes,
                            outcome: JobState::Completed,
                            exit_code: None,
                            stop: None,
                            reason: None,
                        },
                    );
                }
                _ => {
                    let mut rec = rec;
                    rec.state = JobState::Cancelled;
                    rec.end_time = Some(now);
                    self.tx.steps.push(rec);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(rank: u32, node: u32, cores: Vec<u32>, gpus: Vec<u32>) -> TaskAlloc {
        TaskAlloc {
            group: 0,
            rank,
            node: NodeId(node),
            cores,
            gpus,
            gpu_milli_each: 1000,
            nics: vec![],
            mem_mib: 1024,
            named: vec![],
        }
    }

    /// A job of 4 tasks on nodes 1 and 2, two tasks of 2 cores and 2 GPUs on each.
    fn job() -> Allocation {
        Allocation {
            tasks: vec![
                task(0, 1, vec![0, 1], vec![0, 1]),
                task(1, 1, vec![2, 3], vec![2, 3]),
                task(2, 2, vec![0, 1], vec![0, 1]),
                task(3, 2, vec![2, 3], vec![2, 3]),
            ],
            exclusive: false,
        }
    }

    fn layout(req: StepRequest) -> Result<Allocation, String> {
        step_layout(
            JobId(7),
            &job(),
            &|n| format!("node{:03}", n.0),
            &|name| {
                name.strip_prefix("node")
                    .and_then(|n| n.parse().ok())
                    .map(NodeId)
            },
            &req,
        )
    }

    fn shape(a: &Allocation) -> Vec<(u32, u32, usize, usize)> {
        a.tasks
            .iter()
            .map(|t| (t.rank, t.node.0, t.cores.len(), t.gpus.len()))
            .collect()
    }

    #[test]
    fn by_default_a_step_is_the_jobs_tasks_with_every_gpu_of_their_node() {
        let a = layout(StepRequest::default()).unwrap();
        assert_eq!(
            shape(&a),
            vec![(0, 1, 2, 4), (1, 1, 2, 4), (2, 2, 2, 4), (3, 2, 2, 4)]
        );
        // Cores are divided, never shared.
        assert_eq!(a.tasks[0].cores, vec![0, 1]);
        assert_eq!(a.tasks[1].cores, vec![2, 3]);
    }

    #[test]
    fn one_task_per_node_gets_the_whole_node_share() {
        let a = layout(StepRequest {
            ntasks_per_node: Some(1),
            ..StepRequest::default()
        })
        .unwrap();
        assert_eq!(shape(&a), vec![(0, 1, 4, 4), (1, 2, 4, 4)]);
        assert_eq!(a.tasks[0].mem_mib, 2048);
    }

    #[test]
    fn counts_and_lists_pick_the_first_nodes_and_spread_in_blocks() {
        let a = layout(StepRequest {
            ntasks: Some(3),
            gpus_per_task: Some(1),
            ..StepRequest::default()
        })
        .unwrap();
        assert_eq!(shape(&a), vec![(0, 1, 2, 1), (1, 1, 2, 1), (2, 2, 4, 1)]);
        assert_eq!(a.tasks[1].gpus, vec![1]);
        let a = layout(StepRequest {
            nodes: Some(1),
            ..StepRequest::default()
        })
        .unwrap();
        assert_eq!(shape(&a), vec![(0, 1, 2, 4), (1, 1, 2, 4)]);
        let a = layout(StepRequest {
            nodelist: Some("node002".into()),
            ntasks: Some(1),
            ..StepRequest::default()
        })
        .unwrap();
        assert_eq!(shape(&a), vec![(0, 2, 4, 4)]);
        // Fewer tasks than nodes: the last nodes are dropped.
        let a = layout(StepRequest {
            ntasks: Some(1),
            ..StepRequest::default()
        })
        .unwrap();
        assert_eq!(shape(&a), vec![(0, 1, 4, 4)]);
    }

    #[test]
    fn a_step_cannot_ask_beyond_its_job() {
        let err = |req| layout(req).unwrap_err();
        assert_eq!(
            err(StepRequest {
                nodes: Some(3),
                ..StepRequest::default()
            }),
            "only 2 node(s) are allocated to job 7 (node[001-002]), the step asks for 3"
        );
        assert_eq!(
            err(StepRequest {
                nodelist: Some("node009".into()),
                ..StepRequest::default()
            }),
            "node node009 is not allocated to job 7 (its nodes are node[001-002])"
        );
        assert_eq!(
            err(StepRequest {
                ntasks: Some(4),
                cpus_per_task: Some(3),
                ..StepRequest::default()
            }),
            "2 task(s) of 3 CPU(s) do not fit in job 7's 4 CPU(s) on node001"
        );
        assert_eq!(
            err(StepRequest {
                ntasks: Some(2),
                gpus_per_task: Some(5),
                ..StepRequest::default()
            }),
            "1 task(s) of 5 GPU(s) do not fit in job 7's 4 GPU(s) on node001"
        );
        assert!(
            err(StepRequest {
                ntasks: Some(0),
                ..StepRequest::default()
            })
            .contains("at least 1")
        );
    }

    /// Regression (issue 14): `"ntasks": 4294967295` sized the step's task list before any
    /// check, and the allocation aborted the controller; `ntasks_per_node` times the nodes
    /// wrapped around.
    #[test]
    fn a_step_of_four_billion_tasks_is_refused_before_anything_is_sized_by_it() {
        let err = |req| layout(req).unwrap_err();
        assert_eq!(
            err(StepRequest {
                ntasks: Some(u32::MAX),
                ..StepRequest::default()
            }),
            "ntasks = 4294967295 is out of range: at most 8, as job 7 holds 8 CPU(s) on the \
             step's 2 node(s) and each task needs one"
        );
        assert_eq!(
            err(StepRequest {
                ntasks_per_node: Some(u32::MAX / 2 + 1),
                ..StepRequest::default()
            }),
            "ntasks_per_node = 2147483648 is out of range: at most 4, as job 7 holds 8 CPU(s) \
             on the step's 2 node(s) and each task needs one"
        );
        assert!(
            err(StepRequest {
                ntasks: Some(2),
                cpus_per_task: Some(u32::MAX),
                gpus_per_task: Some(u32::MAX),
                ..StepRequest::default()
            })
            .contains("do not fit in job 7's 4 CPU(s) on node001")
        );
        assert!(
            err(StepRequest {
                ntasks: Some(2),
                gpus_per_task: Some(u32::MAX),
                ..StepRequest::default()
            })
            .contains("do not fit in job 7's 4 GPU(s) on node001")
        );
    }

    use proptest::prelude::*;

    fn any_count() -> impl Strategy<Value = Option<u32>> {
        proptest::option::of(prop_oneof![
            0u32..10,
            Just(u32::MAX),
            Just(u32::MAX / 2 + 1),
            any::<u32>()
        ])
    }

    prop_compose! {
        /// A job of 1 to 4 nodes (ids 1..=4), each with 1 to 3 tasks of 1 to 3 cores and 0
        /// to 2 GPUs, numbered from 0 on each node.
        fn any_job()(per_node in proptest::collection::vec(
            proptest::collection::vec((1u32..4, 0u32..3), 1..4), 1..5)
        ) -> Allocation {
            let mut tasks = Vec::new();
            for (n, node_tasks) in per_node.iter().enumerate() {
                let (mut core, mut gpu) = (0, 0);
                for &(cores, gpus) in node_tasks {
                    let rank = tasks.len() as u32;
                    tasks.push(task(
                        rank,
                        n as u32 + 1,
                        (core..core + cores).collect(),
                        (gpu..gpu + gpus).collect(),
                    ));
                    core += cores;
                    gpu += gpus;
                }
            }
            Allocation { tasks, exclusive: false }
        }
    }

    proptest! {
        /// Whatever counts a step asks for, it is refused or laid out within its job: ranks
        /// 0..n, the count asked, only the job's nodes, cores and GPUs, no core given twice
        /// on a node.
        #[test]
        fn any_counts_in_a_step_are_refused_or_laid_out_within_the_job(
            job in any_job(),
            nodes in any_count(),
            ntasks in any_count(),
            ntasks_per_node in any_count(),
            cpus_per_task in any_count(),
            gpus_per_task in any_count(),
        ) {
            let req = StepRequest {
                nodes,
                ntasks,
                ntasks_per_node,
                cpus_per_task,
                gpus_per_task,
                ..StepRequest::default()
            };
            let result = step_layout(
                JobId(7),
                &job,
                &|n| format!("node{:03}", n.0),
                &|name| name.strip_prefix("node").and_then(|n| n.parse().ok()).map(NodeId),
                &req,
            );
            let Ok(step) = result else {
                return Ok(());
            };
            let ranks: Vec<u32> = step.tasks.iter().map(|t| t.rank).collect();
            prop_assert_eq!(ranks, (0..step.tasks.len() as u32).collect::<Vec<_>>());
            if let Some(n) = ntasks {
                prop_assert_eq!(step.tasks.len(), n as usize);
            }
            let mut used = BTreeSet::new();
            for t in &step.tasks {
                let held: Vec<&TaskAlloc> = job.tasks.iter().filter(|j| j.node == t.node).collect();
                prop_assert!(!held.is_empty(), "task on node {:?} outside the job", t.node);
                prop_assert!(!t.cores.is_empty());
                for c in &t.cores {
                    prop_assert!(held.iter().any(|j| j.cores.contains(c)));
                    prop_assert!(used.insert((t.node, *c)), "core {} given twice", c);
                }
                for g in &t.gpus {
                    prop_assert!(held.iter().any(|j| j.gpus.contains(g)));
                }
            }
        }
    }
}
