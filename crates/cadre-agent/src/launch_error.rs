//! What goes wrong launching or supervising a task: [`LaunchError`], re-exported by
//! [`crate::launch`].
//!
//! A module of its own because the task's environment ([`crate::jobenv`]) and its
//! supervision ([`crate::supervise`]) fail with it too, and [`crate::launch`] uses both.

use crate::cgroup::CgroupError;
use crate::container;
use cadre_core::cluster::NodeId;
use cadre_core::job::JobId;
use nix::errno::Errno;
use std::io;
use std::path::PathBuf;

/// What went wrong launching or supervising a task.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("job {job} has {tasks} tasks; there is no task {index}")]
    NoSuchTask {
        job: JobId,
        index: usize,
        tasks: usize,
    },
    #[error("task {index} of job {job} is not placed on node {node}")]
    TaskNotOnNode {
        job: JobId,
        index: usize,
        node: String,
    },
    #[error("job {job} uses node id {} but no name was given for it", node.0)]
    UnknownNodeName { job: JobId, node: NodeId },
    #[error("job {job} is allocated GPU position {gpu} but this node has {gpus} GPUs")]
    GpuOutOfRange { job: JobId, gpu: u32, gpus: usize },
    #[error("job {job} is allocated core {core} but this node has {cores} cores")]
    CoreOutOfRange { job: JobId, core: u32, cores: usize },
    #[error("job {job} has no command to run")]
    EmptyCommand { job: JobId },
    #[error("job {job}: {what} `{value}` contains a NUL byte")]
    NulByte {
        job: JobId,
        what: &'static str,
        value: String,
    },
    #[error("user `{user}` does not exist on this node")]
    UnknownUser { user: String },
    #[error("failed to look up user `{user}`: {source}")]
    UserLookup { user: String, source: Errno },
    #[error("job {job} was submitted by `{submitter}` but was to run as `{user}`")]
    UserMismatch {
        job: JobId,
        submitter: String,
        user: String,
    },
    #[error("refusing to run job {job} of user `{user}` as root (uid 0)")]
    RefuseRoot { job: JobId, user: String },
    /// A pod's `securityContext` asks for more than the job's user may be.
    #[error("job {job}: securityContext.{field}: {why}")]
    Identity {
        job: JobId,
        field: &'static str,
        why: String,
    },
    #[error(
        "cannot run job {job} as `{user}` (uid {uid}): the agent runs as uid {agent_uid}, \
         not root, and can only run its own tasks"
    )]
    CannotSwitchUser {
        job: JobId,
        user: String,
        uid: u32,
        agent_uid: u32,
    },
    #[error("job {job} has no task on node {node}")]
    NoTasksOnNode { job: JobId, node: String },
    #[error("job {job}: working directory {} does not exist", dir.display())]
    NoWorkDir { job: JobId, dir: PathBuf },
    #[error("failed to create a pipe for launching job {job}: {source}")]
    Pipe { job: JobId, source: Errno },
    /// A variable of the task that the container's environment file cannot carry.
    #[error("job {job}: {source}")]
    ContainerEnv {
        job: JobId,
        source: container::EnvFileError,
    },
    #[error("failed to make the environment file of job {job}'s container: {source}")]
    EnvFile { job: JobId, source: Errno },
    /// The image would be read from the node's files or another store of the node, which
    /// only root's jobs may use (see `launch::check_image`).
    #[error(
        "job {job}: the image `{image}` is read through the `{transport}` transport, from the \
         node's own files or stores, which only root's jobs may use (the root runtime would \
         load it into the node's image store under names of its choosing); push it to a \
         registry, or have an administrator load it on the node"
    )]
    ImageTransport {
        job: JobId,
        image: String,
        transport: &'static str,
    },
    #[error("failed to start task {procid} of job {job}: {step}: {source}")]
    Spawn {
        job: JobId,
        procid: u32,
        step: String,
        source: io::Error,
    },
    #[error("job {job}: {source}")]
    Cgroup { job: JobId, source: CgroupError },
    #[error("job {job}, task {procid}: {source}")]
    TaskProlog {
        job: JobId,
        procid: u32,
        source: Box<crate::prolog::ScriptError>,
    },
    #[error("job {job}: cannot make the task's status file for its keeper: {source}")]
    Keeper { job: JobId, source: std::io::Error },
    #[error("failed to send {signal} to task {procid} of job {job} (pid {pid}): {source}")]
    Signal {
        job: JobId,
        procid: u32,
        pid: i32,
        signal: String,
        source: Errno,
    },
    #[error("failed to wait for task {procid} of job {job} (pid {pid}): {source}")]
    Wait {
        job: JobId,
        procid: u32,
        pid: i32,
        source: io::Error,
    },
}
