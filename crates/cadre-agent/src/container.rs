//! Running a workload's task in its container image, with the node's container runtime.
//!
//! **Given**: the runtime the agent was started with (`--container-runtime`: a command line
//! such as `podman` or `podman --runtime /usr/sbin/runc`, whose `run` and `rm` speak
//! podman's and docker's options), and per task what the manifest asks ([`ContainerSpec`]:
//! image, pull policy, `command`/`args`, `workingDir`, the job's files to mount) and what the
//! agent decided (environment, user, memory, GPUs, limits).
//!
//! **Decided** ([`run_command`]): the task's process is the runtime's `run`, in the
//! foreground, so that the agent supervises it as any task: its exit status is the
//! container's, SIGTERM reaches the container (the runtime forwards signals), its output
//! goes where the task's goes. The container gets:
//! - the node's network (`--network host`), as tasks on the host have: the job's names
//!   resolve through the job's hosts file, mounted read-only at `/etc/hosts`, and the MPI
//!   and Volcano files at `/etc/mpi` and `/etc/volcano`;
//! - the task's variables (the contract's, `SLURM_*`, `CUDA_*`, the job's token), but not
//!   the node's `PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `PWD` or `TMPDIR`, which are
//!   the image's business. They are never on the runtime's command line, which every user
//!   of the node reads in `/proc/PID/cmdline`: they are in an environment file
//!   ([`env_file`], `--env-file`) that only the agent's user can read (a memory file the
//!   runtime inherits, see [`crate::launch`]);
//! - the job's user: `--user UID:GID` from a root agent (a manifest's `runAsUser` never
//!   changes it); `--userns keep-id` from an agent that is not root (rootless podman), so
//!   that the user inside is the user outside;
//! - no capabilities (`--cap-drop ALL`, a root job's too) but those its manifest asks for
//!   that the node allows (`--cap-add`, checked by [`crate::workload`]), and no way to gain
//!   any (`--security-opt no-new-privileges`: set-user-id programs of the image do not
//!   raise privileges);
//! - its memory as a limit (`--memory`), its cores by inheritance (the runtime is started
//!   with the task's CPU affinity), its real GPUs as CDI devices (`--device
//!   nvidia.com/gpu=INDEX`, numbered from 0 inside, so `CUDA_VISIBLE_DEVICES` becomes
//!   `0,..`); emulated GPUs are only the variables they are on the host;
//! - the agent's open-file and process limits (`--ulimit`): a rootful runtime otherwise
//!   asks for its own defaults (podman: 1 048 576 open files), above many hosts' hard
//!   limits, and the container does not start. The process limit is capped at the kernel's
//!   `pid_max`, which no count of processes can exceed anyway;
//! - a name of the agent, run and rank (`cadre-<tag>-job<J>.<R>-<rank>`, see
//!   [`container_name`]), `--replace` so that a
//!   leftover of an earlier attempt is no obstacle, and `--rm`.
//!
//! **Must hold**: the container never outlives its task. A runtime's container is not a
//! child of the `run` process (podman's `conmon` runs it), so killing the task's process
//! group does not reach it; the task's end is followed by [`remove`] (`rm --force --time 0
//! --ignore NAME`), which kills it if it still runs.
//!
//! The runtime runs as the agent (root, for a root agent): it is started with the agent's
//! own environment, never the job's, so that no job can point a root runtime at
//! configuration of its own (`CONTAINERS_CONF`, `HOME`).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cadre_k8s::PullPolicy;

/// The node's container runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRuntime {
    /// The command and its global options.
    argv: Vec<String>,
    /// The first line of what `--version` printed.
    version: String,
}

/// Why the configured runtime cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("the container runtime `{line}` is not a command line: {what}")]
    Parse { line: String, what: String },
    #[error("the container runtime `{line}` cannot be run: {source}")]
    Spawn { line: String, source: io::Error },
    #[error("the container runtime `{line}` did not answer `--version` within {secs} s")]
    Timeout { line: String, secs: u64 },
    #[error("the container runtime `{line}` failed `--version` ({status}): {stderr}")]
    Failed {
        line: String,
        status: String,
        stderr: String,
    },
    #[error(
        "the container runtime `{line}` is `{version}`, whose `--env-file` reader alters \
         values (it removes quotes and `#...`, and replaces an empty value with the \
         runtime's own variable): use a podman other than 4.7.0"
    )]
    EnvFileReader { line: String, version: String },
}

/// How long `--version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);

impl ContainerRuntime {
    /// The runtime of a command line (words split as a shell would, without expansions),
    /// checked by running it with `--version`.
    pub fn detect(line: &str) -> Result<ContainerRuntime, RuntimeError> {
        let argv = shlex::split(line)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| RuntimeError::Parse {
                line: line.to_string(),
                what: "empty, or an unfinished quote".into(),
            })?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| RuntimeError::Spawn {
                line: line.to_string(),
                source,
            })?;
        let out = wait_with_timeout(child, VERSION_TIMEOUT).map_err(|e| match e {
            Some(source) => RuntimeError::Spawn {
                line: line.to_string(),
                source,
            },
            None => RuntimeError::Timeout {
                line: line.to_string(),
                secs: VERSION_TIMEOUT.as_secs(),
            },
        })?;
        if !out.status.success() {
            return Err(RuntimeError::Failed {
                line: line.to_string(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let version = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        // podman 4.7.0 read environment files as dotenv files; 4.7.1 went back to plain
        // `NAME=VALUE` lines. With it, the job's variables would not arrive as they are.
        if version.starts_with("podman version 4.7.0") {
            return Err(RuntimeError::EnvFileReader {
                line: line.to_string(),
                version,
            });
        }
        Ok(ContainerRuntime { argv, version })
    }

    /// What `--version` said (`podman version 4.3.1`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The command and its global options.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }
}

/// Waits for `child` at most `limit`, killing it past that (`Err(None)`).
fn wait_with_timeout(
    mut child: std::process::Child,
    limit: Duration,
) -> Result<std::process::Output, Option<io::Error>> {
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(Some),
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(None);
            }
            Err(e) => return Err(Some(e)),
        }
    }
}

/// What a task's container is, from its manifest and the job's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The runtime's command and global options.
    pub runtime: Vec<String>,
    /// The container's name on the node.
    pub name: String,
    pub image: String,
    pub pull: PullPolicy,
    /// `command`: replaces the image's entrypoint (and its default arguments).
    pub command: Option<Vec<String>>,
    /// `args`: replace the image's default arguments.
    pub args: Vec<String>,
    /// `workingDir`; `None`: the image's.
    pub work_dir: Option<String>,
    /// Read-only mounts `(on the node, in the container)`.
    pub mounts: Vec<(PathBuf, String)>,
    /// The node's GPUs are real: allocated ones are passed as CDI devices.
    pub gpu_devices: bool,
    /// The capabilities given back after all are dropped (the manifest's, which the node
    /// allows).
    pub capabilities: Vec<String>,
    /// The container's host name (a pod's).
    pub hostname: Option<String>,
    /// Private tmpfs mounts `(in the container, size in bytes)` (`emptyDir` of `medium:
    /// Memory`); `/dev/shm` is sized with `--shm-size`.
    pub tmpfs: Vec<(String, Option<u64>)>,
    /// Writable mounts `(on the node, in the container)` (`emptyDir` on disk).
    pub writable: Vec<(PathBuf, String)>,
}

/// What the agent decided for one task's container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSettings {
    /// The task's environment, as it would be on the host.
    pub env: Vec<(String, String)>,
    /// `Some((uid, gid))`: a root agent runs the container as this user; `None`: the agent
    /// is the user (rootless runtime).
    pub user: Option<(u32, u32)>,
    /// The task's memory (0: no limit).
    pub mem_mib: u64,
    /// Device indices of the task's GPUs.
    pub gpus: Vec<u32>,
    /// `(soft, hard)` limits of open files and of processes to give the container.
    pub nofile: Option<(u64, u64)>,
    pub nproc: Option<(u64, u64)>,
}

/// Variables of the host that are the image's business, not the task's.
const HOST_ONLY: [&str; 7] = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "TMPDIR"];

/// Where the runtime reads an image from, by the transport its reference names
/// (containers/image's `TRANSPORT:REFERENCE`; a reference naming none is a registry's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageSource {
    /// A registry (`docker://`, or no transport) or the runtime's own store
    /// (`containers-storage:IMAGE`).
    Store,
    /// Files or directories of the node, which the runtime reads with its own rights:
    /// `dir:PATH`, `oci:PATH[:REF]`, `oci-archive:PATH[:REF]`,
    /// `docker-archive:PATH[:REF]`, `sif:PATH`, `tarball:PATH[:PATH...]`.
    Paths {
        transport: &'static str,
        paths: Vec<String>,
    },
    /// Another store of the node: `docker-daemon:`, `ostree:`, or `containers-storage:`
    /// naming a storage location of its own (`[driver@/root...]IMAGE`).
    NodeStore { transport: &'static str },
}

/// Where the runtime reads `image` from (see [`ImageSource`]).
pub fn image_source(image: &str) -> ImageSource {
    let Some((transport, reference)) = image.split_once(':') else {
        return ImageSource::Store;
    };
    // The path ends at the first colon for the transports that take a reference after it.
    let up_to_colon = || vec![reference.split(':').next().unwrap_or("").to_string()];
    let (transport, paths) = match transport {
        "dir" => ("dir", vec![reference.to_string()]),
        "sif" => ("sif", vec![reference.to_string()]),
        "oci" => ("oci", up_to_colon()),
        "oci-archive" => ("oci-archive", up_to_colon()),
        "docker-archive" => ("docker-archive", up_to_colon()),
        // Several files, and `-` for the runtime's standard input (nothing to read).
        "tarball" => (
            "tarball",
            reference
                .split(':')
                .filter(|p| *p != "-")
                .map(str::to_string)
                .collect(),
        ),
        "docker-daemon" => {
            return ImageSource::NodeStore {
                transport: "docker-daemon",
            };
        }
        "ostree" => {
            return ImageSource::NodeStore {
                transport: "ostree",
            };
        }
        "containers-storage" if reference.starts_with('[') => {
            return ImageSource::NodeStore {
                transport: "containers-storage",
            };
        }
        _ => return ImageSource::Store,
    };
    ImageSource::Paths { transport, paths }
}

/// A container's name for task `rank` of a run of the agent whose state directory is
/// `scope` (`cadre-1f3a9c0e-job12.0-3`): the runtime's names are the machine's, and two
/// clusters on one machine (or the test clusters of one run) number their jobs alike, so
/// the name carries a tag of the agent's own (its state directory's, hashed with FNV-1a:
/// stable across the agent's restarts and versions).
pub fn container_name(scope: &Path, job: u64, run: u32, step: Option<u32>, rank: u32) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in scope.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let tag = format!("{:08x}", (h >> 32) as u32 ^ h as u32);
    match step {
        Some(s) => format!("cadre-{tag}-job{job}.{run}.{s}-{rank}"),
        None => format!("cadre-{tag}-job{job}.{run}-{rank}"),
    }
}

/// Why the task's variables cannot be given to its container.
///
/// The runtime reads its environment file (podman's and docker's `--env-file`) a line at a
/// time: leading blanks and lines starting with `#` are skipped, a line is `NAME=VALUE`
/// with the value taken as it is up to the end of the line (a carriage return before the
/// end dropped), and a line may have at most 65 535 bytes. What that format cannot carry
/// exactly is refused rather than altered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvFileError {
    #[error(
        "variable `{name}` cannot be given to the container: its value contains a newline, \
         which the runtime's environment file cannot carry"
    )]
    Newline { name: String },
    #[error(
        "variable `{name}` cannot be given to the container: its value ends with a carriage \
         return, which the runtime's environment file drops"
    )]
    CarriageReturn { name: String },
    #[error("variable `{name}` cannot be given to the container: its value contains a NUL byte")]
    Nul { name: String },
    #[error("variable name `{name}` cannot be given to the container: {why}")]
    Name { name: String, why: &'static str },
    #[error(
        "variable `{name}` cannot be given to the container: `NAME=VALUE` is {len} bytes, \
         above the {ENV_FILE_LINE_MAX} bytes a line of the runtime's environment file may have"
    )]
    TooLong { name: String, len: usize },
}

/// The longest line podman's environment file reader takes (Go's `bufio.Scanner`: 64 KiB
/// with the newline).
pub const ENV_FILE_LINE_MAX: usize = 64 * 1024 - 1;

/// The variables the container gets: the task's, without the host's own (`HOST_ONLY`),
/// with `CUDA_VISIBLE_DEVICES` renumbered from 0 when its GPUs are devices.
fn container_env(spec: &ContainerSpec, task: &TaskSettings) -> Vec<(String, String)> {
    let devices = spec.gpu_devices && !task.gpus.is_empty();
    task.env
        .iter()
        .filter(|(k, _)| !HOST_ONLY.contains(&k.as_str()))
        .map(|(k, v)| {
            let v = if devices && k == "CUDA_VISIBLE_DEVICES" {
                (0..task.gpus.len())
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

/// The text of the environment file that gives the container its variables (see
/// [`EnvFileError`] for the format): one `NAME=VALUE` line each, in the task's order.
pub fn env_file(spec: &ContainerSpec, task: &TaskSettings) -> Result<String, EnvFileError> {
    let mut text = String::new();
    for (name, value) in container_env(spec, task) {
        let bad_name = |why| EnvFileError::Name {
            name: name.clone(),
            why,
        };
        if name.is_empty() {
            return Err(bad_name("it is empty"));
        }
        if name.contains(['=', '\n', '\r', '\0']) {
            return Err(bad_name(
                "it contains `=`, a newline, a carriage return or a NUL byte",
            ));
        }
        if name.starts_with([' ', '\t', '#']) {
            return Err(bad_name("it starts with a blank or `#`"));
        }
        if value.contains('\n') {
            return Err(EnvFileError::Newline { name });
        }
        if value.ends_with('\r') {
            return Err(EnvFileError::CarriageReturn { name });
        }
        if value.contains('\0') {
            return Err(EnvFileError::Nul { name });
        }
        let len = name.len() + 1 + value.len();
        if len > ENV_FILE_LINE_MAX {
            return Err(EnvFileError::TooLong { name, len });
        }
        text.push_str(&name);
        text.push('=');
        text.push_str(&value);
        text.push('\n');
    }
    Ok(text)
}

/// The command line that runs the task's container in the foreground (see the module doc),
/// its variables read from `env_file` (a path to the text of [`env_file`]).
pub fn run_command(spec: &ContainerSpec, task: &TaskSettings, env_file: &str) -> Vec<String> {
    let mut c: Vec<String> = spec.runtime.clone();
    let mut add = |words: &[&str]| c.extend(words.iter().map(|w| w.to_string()));
    add(&["run", "--rm", "--replace", "--name", &spec.name]);
    add(&["--network", "host", "--log-driver", "none"]);
    let pull = match spec.pull {
        PullPolicy::Always => "always",
        PullPolicy::IfNotPresent => "missing",
        PullPolicy::Never => "never",
    };
    add(&["--pull", pull]);
    match task.user {
        Some((uid, gid)) => add(&["--user", &format!("{uid}:{gid}")]),
        None => add(&["--userns", "keep-id"]),
    }
    add(&["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]);
    for cap in &spec.capabilities {
        add(&["--cap-add", cap]);
    }
    if let Some((soft, hard)) = task.nofile {
        add(&["--ulimit", &format!("nofile={soft}:{hard}")]);
    }
    if let Some((soft, hard)) = task.nproc {
        add(&["--ulimit", &format!("nproc={soft}:{hard}")]);
    }
    if task.mem_mib > 0 {
        add(&["--memory", &format!("{}m", task.mem_mib)]);
    }
    let devices = spec.gpu_devices && !task.gpus.is_empty();
    if devices {
        for g in &task.gpus {
            add(&["--device", &format!("nvidia.com/gpu={g}")]);
        }
    }
    for (on_node, inside) in &spec.mounts {
        add(&["--volume", &format!("{}:{inside}:ro", on_node.display())]);
    }
    if let Some(dir) = &spec.work_dir {
        add(&["--workdir", dir]);
    }
    if let Some(name) = &spec.hostname {
        add(&["--hostname", name]);
    }
    for (at, size) in &spec.tmpfs {
        match (at.as_str(), size) {
            ("/dev/shm", Some(n)) => add(&["--shm-size", &n.to_string()]),
            ("/dev/shm", None) => {}
            (_, Some(n)) => add(&[
                "--tmpfs",
                &format!("{at}:rw,nosuid,nodev,size={n},mode=1777"),
            ]),
            (_, None) => add(&["--tmpfs", &format!("{at}:rw,nosuid,nodev,mode=1777")]),
        }
    }
    for (on_node, inside) in &spec.writable {
        add(&["--volume", &format!("{}:{inside}:rw", on_node.display())]);
    }
    // Never `--env NAME=VALUE`: the command line is every local user's to read.
    add(&["--env-file", env_file]);
    if let Some(command) = &spec.command {
        // JSON: the one form that keeps each word whole.
        let json = serde_json::to_string(command).unwrap_or_else(|_| "[]".into());
        add(&["--entrypoint", &json]);
    }
    add(&["--", &spec.image]);
    c.extend(spec.args.iter().cloned());
    c
}

/// A step's task that runs inside another task's running container (`exec`), as `kubectl
/// exec` does: MPI's daemons started by `cadre rsh` in an MPI worker's image. It has that
/// container's user, environment and working directory; the container is not the step's
/// and outlives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecIn {
    /// The runtime's command and global options.
    pub runtime: Vec<String>,
    /// The running container's name ([`container_name`] of its task).
    pub name: String,
}

/// The runtime's command line that runs `command` in `exec`'s container, in the
/// foreground: its exit status is the command's.
pub fn exec_command(exec: &ExecIn, command: &[String]) -> Vec<String> {
    let mut c = exec.runtime.clone();
    c.push("exec".into());
    c.push(exec.name.clone());
    c.extend(command.iter().cloned());
    c
}

/// What a program of this executable needs to run in an image that has none of the node's
/// libraries: its dynamic loader and the shared libraries it has loaded, read from
/// `/proc/self/maps` (the agent is the `cadre` executable whose `rsh` goes into containers;
/// its libraries are the ones it needs). `None` when there is no loader (a static build)
/// or the maps cannot be read.
pub fn own_libraries() -> Option<(PathBuf, Vec<PathBuf>)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    libraries_in_maps(&maps)
}

fn libraries_in_maps(maps: &str) -> Option<(PathBuf, Vec<PathBuf>)> {
    let mut loader = None;
    let mut libraries: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let Some(path) = line
            .split_whitespace()
            .nth(5)
            .filter(|p| p.starts_with('/'))
        else {
            continue;
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        if !name.contains(".so") {
            continue;
        }
        let path = PathBuf::from(path);
        if name.starts_with("ld-linux") || name.starts_with("ld-musl") {
            loader = Some(path);
        } else if !libraries.contains(&path) {
            libraries.push(path);
        }
    }
    loader.map(|l| (l, libraries))
}

/// The pauses between attempts at removing a task's container: a removal can fail while
/// the runtime is busy (another of its commands holding its locks, the container's exit
/// still being recorded), and a container left behind keeps its name and its storage.
const REMOVE_PAUSES: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];

/// Why a removal failed.
enum RemoveFailure {
    /// The runtime answered with an error: it may be busy, worth trying again.
    Refused(String),
    /// The runtime could not be run, or did not answer in time: trying again would wait
    /// as long for nothing.
    Failed(String),
}

/// Removes the task's container, killing it if it still runs (`rm --force --time 0
/// --ignore`). When the runtime refuses, the removal is tried again after 1 s and after
/// 3 s more if `again`; what went wrong, if the last attempt failed too.
pub fn remove(runtime: &[String], name: &str, again: bool) -> Result<(), String> {
    let pauses: &[Duration] = if again { &REMOVE_PAUSES } else { &[] };
    remove_with_pauses(runtime, name, pauses)
}

fn remove_with_pauses(runtime: &[String], name: &str, pauses: &[Duration]) -> Result<(), String> {
    let mut failures = Vec::new();
    let mut pauses = pauses.iter();
    loop {
        match remove_once(runtime, name) {
            Ok(()) if failures.is_empty() => return Ok(()),
            Ok(()) => {
                let failed = what_failed(&failures);
                tracing::info!(container = %name, %failed, "removed the container after failed attempts");
                return Ok(());
            }
            Err(RemoveFailure::Refused(e)) => failures.push(e),
            Err(RemoveFailure::Failed(e)) => {
                failures.push(e);
                return Err(what_failed(&failures));
            }
        }
        match pauses.next() {
            Some(pause) => std::thread::sleep(*pause),
            None => return Err(what_failed(&failures)),
        }
    }
}

/// What went wrong at a removal's attempts, in order; said once when they all failed alike.
fn what_failed(failures: &[String]) -> String {
    match failures {
        [first, rest @ ..] if !rest.is_empty() && rest.iter().all(|f| f == first) => {
            format!("{} attempts failed alike: {first}", failures.len())
        }
        _ => failures.join("; then "),
    }
}

fn remove_once(runtime: &[String], name: &str) -> Result<(), RemoveFailure> {
    use RemoveFailure::{Failed, Refused};
    let Some((program, global)) = runtime.split_first() else {
        return Err(Failed("no runtime command".into()));
    };
    let child = Command::new(program)
        .args(global)
        .args(["rm", "--force", "--time", "0", "--ignore", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failed(format!("cannot run {program}: {e}")))?;
    match wait_with_timeout(child, Duration::from_secs(30)) {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(Refused(format!(
            "{program} rm {name} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
        Err(Some(e)) => Err(Failed(format!("{program} rm {name}: {e}"))),
        Err(None) => Err(Failed(format!(
            "{program} rm {name} did not finish within 30 s"
        ))),
    }
}

/// The agent's own `(soft, hard)` limit of a resource, the hard one capped at `cap`.
pub fn own_limit(resource: nix::sys::resource::Resource, cap: Option<u64>) -> Option<(u64, u64)> {
    let (soft, hard) = nix::sys::resource::getrlimit(resource).ok()?;
    let cap = cap.unwrap_or(u64::MAX);
    Some((soft.min(cap), hard.min(cap)))
}

/// The kernel's largest process id (`/proc/sys/kernel/pid_max`).
pub fn pid_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime command that fails its first `fails` calls: a shell script counting its
    /// calls in the file `calls` of `dir`, given as its `$0` (what follows, `rm --force
    /// ...`, are its arguments, unread).
    fn failing_runtime(dir: &Path, fails: u32) -> Vec<String> {
        let calls = dir.join("calls").to_string_lossy().into_owned();
        let script = format!(
            "echo call >> \"$0\"; [ $(wc -l < \"$0\") -gt {fails} ] || {{ echo busy >&2; exit 1; }}"
        );
        vec!["sh".into(), "-c".into(), script, calls]
    }

    fn calls(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("calls")).map_or(0, |s| s.lines().count())
    }

    #[test]
    fn a_removal_that_fails_is_tried_again() {
        let pauses = [Duration::from_millis(10), Duration::from_millis(10)];
        let dir = tempfile::tempdir().unwrap();
        let runtime = failing_runtime(dir.path(), 2);
        assert_eq!(remove_with_pauses(&runtime, "c1", &pauses), Ok(()));
        assert_eq!(calls(dir.path()), 3);

        let dir = tempfile::tempdir().unwrap();
        let runtime = failing_runtime(dir.path(), 3);
        let err = remove_with_pauses(&runtime, "c1", &pauses).unwrap_err();
        assert_eq!(calls(dir.path()), 3, "no more attempts than pauses and one");
        assert_eq!(
            err,
            "3 attempts failed alike: sh rm c1 failed (exit status: 1): busy"
        );
        // Without pauses (as when a task is dropped), one attempt.
        let dir = tempfile::tempdir().unwrap();
        let runtime = failing_runtime(dir.path(), 1);
        let err = remove(&runtime, "c1", false).unwrap_err();
        assert_eq!(calls(dir.path()), 1);
        assert_eq!(err, "sh rm c1 failed (exit status: 1): busy");
        // A runtime that cannot be run is not tried again.
        let missing = ["/nonexistent/runtime".to_string()];
        let err = remove_with_pauses(&missing, "c1", &pauses).unwrap_err();
        assert!(err.starts_with("cannot run /nonexistent/runtime"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let runtime = failing_runtime(dir.path(), 0);
        assert_eq!(remove_with_pauses(&runtime, "c1", &pauses), Ok(()));
        assert_eq!(calls(dir.path()), 1, "a removal that works is made once");
    }

    #[test]
    fn the_loader_and_libraries_are_read_from_the_maps() {
        let maps = "\
5581d000-5581e000 r--p 00000000 08:01 12 /usr/local/bin/cadre
7f10-7f20 r--p 00000000 08:01 13 /usr/lib/x86_64-linux-gnu/libc.so.6
7f20-7f30 r-xp 00001000 08:01 13 /usr/lib/x86_64-linux-gnu/libc.so.6
7f30-7f40 r--p 00000000 08:01 14 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
7f40-7f50 rw-p 00000000 00:00 0 [heap]
7f50-7f60 r--p 00000000 08:01 15 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
";
        let (loader, libs) = libraries_in_maps(maps).unwrap();
        assert_eq!(
            loader,
            PathBuf::from("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        );
        assert_eq!(
            libs,
            [
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libgcc_s.so.1")
            ]
        );
        assert_eq!(
            libraries_in_maps("5581d000-5581e000 r--p 0 08:01 12 /bin/x\n"),
            None
        );
        let (_, ours) = own_libraries().expect("this test is dynamically linked");
        assert!(ours.iter().any(|l| l.to_string_lossy().contains("libc.so")));
    }

    fn spec() -> ContainerSpec {
        ContainerSpec {
            runtime: vec!["podman".into(), "--runtime".into(), "/usr/sbin/runc".into()],
            name: container_name(Path::new("/var/cadre"), 12, 0, None, 3),
            image: "registry.local/train:1".into(),
            pull: PullPolicy::IfNotPresent,
            command: Some(vec!["python3".into(), "train.py".into()]),
            args: vec!["--lr=0.1".into()],
            work_dir: Some("/app".into()),
            mounts: vec![(
                PathBuf::from("/var/cadre/job12.0/hosts"),
                "/etc/hosts".into(),
            )],
            gpu_devices: true,
            capabilities: Vec::new(),
            hostname: None,
            tmpfs: Vec::new(),
            writable: Vec::new(),
        }
    }

    fn settings() -> TaskSettings {
        TaskSettings {
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("HOME".into(), "/home/alice".into()),
                ("RANK".into(), "3".into()),
                ("CUDA_VISIBLE_DEVICES".into(), "4,6".into()),
                ("MSG".into(), "two words".into()),
            ],
            user: Some((1000, 100)),
            mem_mib: 2048,
            gpus: vec![4, 6],
            nofile: Some((1024, 20000)),
            nproc: Some((4096, 32768)),
        }
    }

    #[test]
    fn a_task_runs_its_image_with_its_contract() {
        let c = run_command(&spec(), &settings(), "/proc/self/fd/9");
        let line = c.join(" ").replace(&spec().name, "NAME");
        assert_eq!(
            line,
            "podman --runtime /usr/sbin/runc run --rm --replace --name NAME \
             --network host --log-driver none --pull missing --user 1000:100 \
             --cap-drop ALL --security-opt no-new-privileges \
             --ulimit nofile=1024:20000 --ulimit nproc=4096:32768 --memory 2048m \
             --device nvidia.com/gpu=4 --device nvidia.com/gpu=6 \
             --volume /var/cadre/job12.0/hosts:/etc/hosts:ro --workdir /app \
             --env-file /proc/self/fd/9 \
             --entrypoint [\"python3\",\"train.py\"] -- registry.local/train:1 --lr=0.1"
        );
        assert_eq!(
            env_file(&spec(), &settings()).unwrap(),
            "RANK=3\nCUDA_VISIBLE_DEVICES=0,1\nMSG=two words\n"
        );
    }

    /// Regression: the task's variables were `--env NAME=VALUE` words of the runtime's
    /// command line, which any user of the node reads in `/proc/PID/cmdline` (the job's
    /// token, a manifest's secrets).
    #[test]
    fn no_variable_is_on_the_runtime_s_command_line() {
        let mut t = settings();
        t.env
            .push(("CADRE_TOKEN".into(), "cadre-job-12-0123abcd".into()));
        t.env.push(("API_KEY".into(), "hunter2".into()));
        let c = run_command(&spec(), &t, "/proc/self/fd/9");
        for word in &c {
            assert!(
                !word.contains("0123abcd") && !word.contains("hunter2") && word != "--env",
                "{word} in {c:?}"
            );
        }
        let text = env_file(&spec(), &t).unwrap();
        assert!(
            text.ends_with("CADRE_TOKEN=cadre-job-12-0123abcd\nAPI_KEY=hunter2\n"),
            "{text}"
        );
    }

    /// Regression: a root agent's containers had the runtime's default capabilities (a
    /// root job's container: `CHOWN`, `DAC_OVERRIDE`, `SETUID`, ...) and set-user-id
    /// programs of the image could raise a user's privileges.
    #[test]
    fn a_container_has_no_capabilities_and_cannot_gain_any() {
        for user in [Some((0, 0)), Some((1000, 100)), None] {
            let t = TaskSettings { user, ..settings() };
            let c = run_command(&spec(), &t, "/proc/self/fd/9");
            let at = c
                .iter()
                .position(|w| w == "--cap-drop")
                .expect("--cap-drop");
            assert_eq!(
                c[at..at + 4],
                ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"],
                "{c:?}"
            );
            assert!(!c.iter().any(|w| w == "--cap-add" || w == "--privileged"));
        }
        // What the node allowed of what the manifest asked, after all are dropped.
        let s = ContainerSpec {
            capabilities: vec!["IPC_LOCK".into(), "SYS_NICE".into()],
            hostname: Some("pi-worker-1".into()),
            ..spec()
        };
        let line = run_command(&s, &settings(), "/proc/self/fd/9").join(" ");
        assert!(
            line.contains(
                "--cap-drop ALL --security-opt no-new-privileges --cap-add IPC_LOCK \
                 --cap-add SYS_NICE "
            ),
            "{line}"
        );
        assert!(line.contains(" --hostname pi-worker-1 "), "{line}");
        // A pod's emptyDirs: /dev/shm sized, another tmpfs, a writable directory.
        let s = ContainerSpec {
            tmpfs: vec![
                ("/dev/shm".into(), Some(1 << 26)),
                ("/cache".into(), Some(1 << 20)),
            ],
            writable: vec![("/var/cadre/job12.0/emptydir-0-1".into(), "/scratch".into())],
            ..spec()
        };
        let line = run_command(&s, &settings(), "/proc/self/fd/9").join(" ");
        assert!(
            line.contains(
                " --shm-size 67108864 --tmpfs /cache:rw,nosuid,nodev,size=1048576,mode=1777 \
                 --volume /var/cadre/job12.0/emptydir-0-1:/scratch:rw "
            ),
            "{line}"
        );
    }

    #[test]
    fn image_references_that_make_the_runtime_read_the_node_s_files_are_recognised() {
        let paths = |transport, paths: &[&str]| ImageSource::Paths {
            transport,
            paths: paths.iter().map(|p| p.to_string()).collect(),
        };
        for (image, source) in [
            ("registry.local:5000/train:1", ImageSource::Store),
            ("python:3.12", ImageSource::Store),
            ("docker://busybox:latest", ImageSource::Store),
            ("localhost/cadre-test:1", ImageSource::Store),
            ("containers-storage:localhost/x:1", ImageSource::Store),
            ("dir:/root/img", paths("dir", &["/root/img"])),
            ("dir:/a:b", paths("dir", &["/a:b"])),
            ("oci:/root/layout:train:1", paths("oci", &["/root/layout"])),
            (
                "oci-archive:/root/x.tar",
                paths("oci-archive", &["/root/x.tar"]),
            ),
            (
                "oci-archive:rel/x.tar:ref",
                paths("oci-archive", &["rel/x.tar"]),
            ),
            (
                "docker-archive:/root/x.tar:@0",
                paths("docker-archive", &["/root/x.tar"]),
            ),
            ("sif:/root/x.sif", paths("sif", &["/root/x.sif"])),
            (
                "tarball:/a.tar:-:/b.tar",
                paths("tarball", &["/a.tar", "/b.tar"]),
            ),
            (
                "docker-daemon:busybox:latest",
                ImageSource::NodeStore {
                    transport: "docker-daemon",
                },
            ),
            (
                "ostree:img@/ostree/repo",
                ImageSource::NodeStore {
                    transport: "ostree",
                },
            ),
            (
                "containers-storage:[overlay@/home/bob/storage]img",
                ImageSource::NodeStore {
                    transport: "containers-storage",
                },
            ),
        ] {
            assert_eq!(image_source(image), source, "{image}");
        }
    }

    #[test]
    fn values_the_env_file_carries_exactly_and_those_it_cannot_are_refused() {
        let with = |name: &str, value: &str| {
            let mut t = settings();
            t.env = vec![(name.into(), value.into())];
            env_file(&spec(), &t)
        };
        // What the runtime reads back as it was: the value is the rest of the line.
        for value in [
            "#not a comment",
            "  blanks around  ",
            "\"quoted\"",
            "",
            "a=b",
            "x\ry",
        ] {
            assert_eq!(with("V", value).unwrap(), format!("V={value}\n"));
        }
        let long = "x".repeat(ENV_FILE_LINE_MAX - 2);
        assert!(with("V", &long).is_ok());
        let err = with("V", &format!("{long}x")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "variable `V` cannot be given to the container: `NAME=VALUE` is 65536 bytes, above \
             the 65535 bytes a line of the runtime's environment file may have"
        );
        let err = with("PEM", "-----BEGIN\nKEY").unwrap_err();
        assert_eq!(
            err.to_string(),
            "variable `PEM` cannot be given to the container: its value contains a newline, \
             which the runtime's environment file cannot carry"
        );
        assert_eq!(
            with("W", "dos\r").unwrap_err(),
            EnvFileError::CarriageReturn { name: "W".into() }
        );
        assert_eq!(
            with("N", "a\0b").unwrap_err(),
            EnvFileError::Nul { name: "N".into() }
        );
        for name in ["", "A=B", "#C", " D", "E\nF"] {
            assert!(
                matches!(with(name, "v"), Err(EnvFileError::Name { .. })),
                "{name:?}"
            );
        }
        // The host's own variables are not the container's: not even checked.
        assert_eq!(with("HOME", "a\nb").unwrap(), "");
    }

    #[test]
    fn emulated_gpus_rootless_and_image_defaults() {
        let mut s = spec();
        s.gpu_devices = false;
        s.command = None;
        s.args = Vec::new();
        s.work_dir = None;
        s.pull = PullPolicy::Never;
        let mut t = settings();
        t.user = None;
        t.mem_mib = 0;
        t.nofile = None;
        t.nproc = None;
        let line = run_command(&s, &t, "/proc/self/fd/9")
            .join(" ")
            .replace(&s.name, "NAME");
        assert_eq!(
            line,
            "podman --runtime /usr/sbin/runc run --rm --replace --name NAME \
             --network host --log-driver none --pull never --userns keep-id \
             --cap-drop ALL --security-opt no-new-privileges \
             --volume /var/cadre/job12.0/hosts:/etc/hosts:ro --env-file /proc/self/fd/9 -- registry.local/train:1"
        );
        assert_eq!(
            env_file(&s, &t).unwrap(),
            "RANK=3\nCUDA_VISIBLE_DEVICES=4,6\nMSG=two words\n"
        );
        let name = container_name(Path::new("/var/cadre"), 7, 1, Some(2), 0);
        assert!(
            name.starts_with("cadre-") && name.ends_with("-job7.1.2-0") && name.len() == 25,
            "{name}"
        );
        assert_ne!(
            name,
            container_name(Path::new("/var/other"), 7, 1, Some(2), 0),
            "another agent's"
        );
    }

    #[test]
    fn a_runtime_is_checked_before_use() {
        // A command that answers `--version` like a runtime.
        let rt =
            ContainerRuntime::detect("sh -c 'echo \"fake version 1.0\"; echo more' sh").unwrap();
        assert_eq!(rt.version(), "fake version 1.0");
        assert_eq!(rt.argv()[0], "sh");
        let err = ContainerRuntime::detect("/nonexistent/podman").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the container runtime `/nonexistent/podman` cannot be run: "),
            "{err}"
        );
        let err = ContainerRuntime::detect("sh -c 'echo bad >&2; exit 3' sh").unwrap_err();
        assert!(err.to_string().ends_with("(exit status: 3): bad"), "{err}");
        let err = ContainerRuntime::detect("podman 'unfinished").unwrap_err();
        assert!(err.to_string().contains("unfinished quote"), "{err}");
        assert!(ContainerRuntime::detect("  ").is_err());
        let err = ContainerRuntime::detect("sh -c 'echo podman version 4.7.0' sh").unwrap_err();
        assert!(matches!(err, RuntimeError::EnvFileReader { .. }), "{err}");
        assert!(ContainerRuntime::detect("sh -c 'echo podman version 4.7.1' sh").is_ok());
    }

    #[test]
    fn limits_are_capped() {
        let (soft, hard) =
            own_limit(nix::sys::resource::Resource::RLIMIT_NOFILE, Some(10)).unwrap();
        assert!(soft <= 10 && hard <= 10);
        assert!(pid_max().is_some_and(|p| p > 0));
    }
}
