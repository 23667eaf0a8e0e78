//! `sbatch`'s options: the table (every option Slurm's `sbatch` accepts, so that prefixes
//! are ambiguous or not exactly as there), with that of the options only `srun` and
//! `salloc` have ([`LAUNCH_ONLY`]; [`crate::launch`] makes their tables of both), and
//! [`BatchOptions`], the options of one submission after every source has been applied.
//!
//! Sources and precedence are Slurm's: `#SBATCH` directives first, then the `SBATCH_*`
//! input environment variables ([`crate::env`]), then the command line, each overriding
//! what came before option by option. Values are checked as they are read, with Slurm's
//! messages and exit codes; checks between options run once all sources are in
//! ([`BatchOptions::check`]).
//!
//! Options that cadre's scheduler has no use for (notification, accounting, binding,
//! frequency hints ...) are accepted and kept in [`BatchOptions::recorded`] under their
//! long name, to be shown back and to travel with the job.

use crate::error::SlurmError;
use crate::getopt::{ArgKind, OptDef};
use crate::gres::{GpuRequest, parse_gpus, parse_gres};
use crate::size::parse_mib;
use crate::time::{Clock, TimeLimit, parse_begin, parse_slurm_duration, parse_time_limit};
use std::collections::BTreeMap;

/// Every `sbatch` option.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Opt {
    Account,
    AcctgFreq,
    Array,
    Batch,
    Bb,
    Bbf,
    Begin,
    Chdir,
    ClusterConstraint,
    Clusters,
    Comment,
    Constraint,
    Container,
    Contiguous,
    CoreSpec,
    CoresPerSocket,
    CpuFreq,
    CpusPerGpu,
    CpusPerTask,
    Deadline,
    DelayBoot,
    Dependency,
    Distribution,
    Error,
    Exclude,
    Exclusive,
    Export,
    ExportFile,
    ExtraNodeInfo,
    GetUserEnv,
    Gid,
    GpuBind,
    GpuFreq,
    Gpus,
    GpusPerNode,
    GpusPerSocket,
    GpusPerTask,
    Gres,
    GresFlags,
    Help,
    Hint,
    Hold,
    IgnorePbs,
    Input,
    JobName,
    KillOnInvalidDep,
    Licenses,
    MailType,
    MailUser,
    McsLabel,
    Mem,
    MemBind,
    MemPerCpu,
    MemPerGpu,
    Mincpus,
    Network,
    Nice,
    NoKill,
    NoRequeue,
    Nodefile,
    Nodelist,
    Nodes,
    Ntasks,
    NtasksPerCore,
    NtasksPerGpu,
    NtasksPerNode,
    NtasksPerSocket,
    NtasksPerTres,
    OpenMode,
    Output,
    Overcommit,
    Oversubscribe,
    Parsable,
    Partition,
    Power,
    Prefer,
    Priority,
    Profile,
    Propagate,
    Qos,
    Quiet,
    Reboot,
    Requeue,
    Reservation,
    Signal,
    SocketsPerNode,
    SpreadJob,
    Switches,
    TestOnly,
    ThreadSpec,
    ThreadsPerCore,
    Time,
    TimeMin,
    Tmp,
    TresPerTask,
    Uid,
    Usage,
    UseMinNodes,
    Verbose,
    Version,
    Wait,
    WaitAllNodes,
    Wckey,
    Wrap,
    // `srun` and `salloc` only ([`LAUNCH_ONLY`]).
    Bcast,
    Bell,
    Compress,
    CpuBind,
    DisableStatus,
    Epilog,
    Exact,
    Immediate,
    Jobid,
    KillCommand,
    KillOnBadExit,
    Label,
    Mpi,
    MultiProg,
    NoAllocate,
    NoBell,
    NoShell,
    Overlap,
    PreserveEnv,
    Prolog,
    Pty,
    QuitOnInterrupt,
    Relative,
    ResvPorts,
    SlurmdDebug,
    TaskEpilog,
    TaskProlog,
    Unbuffered,
    WaitSecs,
    X11,
}

macro_rules! opts {
    ($( $long:literal, $short:expr, $arg:ident, $key:ident; )*) => {
        &[ $( OptDef { long: $long, short: $short, arg: ArgKind::$arg, key: Opt::$key }, )* ]
    };
}

/// The option table of `sbatch` (Slurm 22.05's, plus `--tres-per-task` of later releases),
/// in the order glibc lists ambiguous candidates.
pub const SBATCH_OPTIONS: &[OptDef<Opt>] = opts! {
    "account", Some('A'), Required, Account;
    "acctg-freq", None, Required, AcctgFreq;
    "array", Some('a'), Required, Array;
    "batch", None, Required, Batch;
    "bb", None, Required, Bb;
    "bbf", None, Required, Bbf;
    "begin", Some('b'), Required, Begin;
    "chdir", Some('D'), Required, Chdir;
    "cluster-constraint", None, Required, ClusterConstraint;
    "clusters", Some('M'), Required, Clusters;
    "comment", None, Required, Comment;
    "constraint", Some('C'), Required, Constraint;
    "container", None, Required, Container;
    "contiguous", None, None, Contiguous;
    "core-spec", Some('S'), Required, CoreSpec;
    "cores-per-socket", None, Required, CoresPerSocket;
    "cpu-freq", None, Required, CpuFreq;
    "cpus-per-gpu", None, Required, CpusPerGpu;
    "cpus-per-task", Some('c'), Required, CpusPerTask;
    "deadline", None, Required, Deadline;
    "delay-boot", None, Required, DelayBoot;
    "dependency", Some('d'), Required, Dependency;
    "distribution", Some('m'), Required, Distribution;
    "error", Some('e'), Required, Error;
    "exclude", Some('x'), Required, Exclude;
    "exclusive", None, Optional, Exclusive;
    "export", None, Optional, Export;
    "export-file", None, Required, ExportFile;
    "extra-node-info", Some('B'), Required, ExtraNodeInfo;
    "get-user-env", None, Optional, GetUserEnv;
    "gid", None, Required, Gid;
    "gpu-bind", None, Required, GpuBind;
    "gpu-freq", None, Required, GpuFreq;
    "gpus", Some('G'), Required, Gpus;
    "gpus-per-node", None, Required, GpusPerNode;
    "gpus-per-socket", None, Required, GpusPerSocket;
    "gpus-per-task", None, Required, GpusPerTask;
    "gres", None, Required, Gres;
    "gres-flags", None, Required, GresFlags;
    "help", Some('h'), None, Help;
    "hint", None, Required, Hint;
    "hold", Some('H'), None, Hold;
    "ignore-pbs", None, None, IgnorePbs;
    "input", Some('i'), Required, Input;
    "job-name", Some('J'), Required, JobName;
    "kill-on-invalid-dep", None, Required, KillOnInvalidDep;
    "licenses", Some('L'), Required, Licenses;
    "mail-type", None, Required, MailType;
    "mail-user", None, Required, MailUser;
    "mcs-label", None, Required, McsLabel;
    "mem", None, Required, Mem;
    "mem-bind", None, Required, MemBind;
    "mem-per-cpu", None, Required, MemPerCpu;
    "mem-per-gpu", None, Required, MemPerGpu;
    "mincpus", None, Required, Mincpus;
    "network", None, Required, Network;
    "nice", None, Optional, Nice;
    "no-kill", Some('k'), Optional, NoKill;
    "no-requeue", None, None, NoRequeue;
    "nodefile", Some('F'), Required, Nodefile;
    "nodelist", Some('w'), Required, Nodelist;
    "nodes", Some('N'), Required, Nodes;
    "ntasks", Some('n'), Required, Ntasks;
    "ntasks-per-core", None, Required, NtasksPerCore;
    "ntasks-per-gpu", None, Required, NtasksPerGpu;
    "ntasks-per-node", None, Required, NtasksPerNode;
    "ntasks-per-socket", None, Required, NtasksPerSocket;
    "ntasks-per-tres", None, Required, NtasksPerTres;
    "open-mode", None, Required, OpenMode;
    "output", Some('o'), Required, Output;
    "overcommit", Some('O'), None, Overcommit;
    "oversubscribe", Some('s'), None, Oversubscribe;
    "parsable", None, None, Parsable;
    "partition", Some('p'), Required, Partition;
    "power", None, Required, Power;
    "prefer", None, Required, Prefer;
    "priority", None, Required, Priority;
    "profile", None, Required, Profile;
    "propagate", None, Optional, Propagate;
    "qos", Some('q'), Required, Qos;
    "quiet", Some('Q'), None, Quiet;
    "reboot", None, None, Reboot;
    "requeue", None, None, Requeue;
    "reservation", None, Required, Reservation;
    "signal", None, Required, Signal;
    "sockets-per-node", None, Required, SocketsPerNode;
    "spread-job", None, None, SpreadJob;
    "switches", None, Required, Switches;
    "test-only", None, None, TestOnly;
    "thread-spec", None, Required, ThreadSpec;
    "threads-per-core", None, Required, ThreadsPerCore;
    "time", Some('t'), Required, Time;
    "time-min", None, Required, TimeMin;
    "tmp", None, Required, Tmp;
    "tres-per-task", None, Required, TresPerTask;
    "uid", None, Required, Uid;
    "usage", None, None, Usage;
    "use-min-nodes", None, None, UseMinNodes;
    "verbose", Some('v'), None, Verbose;
    "version", Some('V'), None, Version;
    "wait", Some('W'), None, Wait;
    "wait-all-nodes", None, Required, WaitAllNodes;
    "wckey", None, Required, Wckey;
    "wrap", None, Required, Wrap;
};

/// The options of `srun` and `salloc` that `sbatch` does not have, or has in another form
/// (`srun --wait` takes seconds; `sbatch --wait` takes none).
pub const LAUNCH_ONLY: &[OptDef<Opt>] = opts! {
    "bcast", None, Optional, Bcast;
    "bell", None, None, Bell;
    "compress", None, Optional, Compress;
    "cpu-bind", None, Required, CpuBind;
    "disable-status", Some('X'), None, DisableStatus;
    "epilog", None, Required, Epilog;
    "exact", None, None, Exact;
    "immediate", Some('I'), Optional, Immediate;
    "jobid", None, Required, Jobid;
    "kill-command", Some('K'), Optional, KillCommand;
    "kill-on-bad-exit", Some('K'), Optional, KillOnBadExit;
    "label", Some('l'), None, Label;
    "mpi", None, Required, Mpi;
    "multi-prog", None, None, MultiProg;
    "no-allocate", Some('Z'), None, NoAllocate;
    "no-bell", None, None, NoBell;
    "no-shell", None, None, NoShell;
    "overlap", None, None, Overlap;
    "preserve-env", Some('E'), None, PreserveEnv;
    "prolog", None, Required, Prolog;
    "pty", None, None, Pty;
    "quit-on-interrupt", None, None, QuitOnInterrupt;
    "relative", Some('r'), Required, Relative;
    "resv-ports", None, Optional, ResvPorts;
    "slurmd-debug", None, Required, SlurmdDebug;
    "task-epilog", None, Required, TaskEpilog;
    "task-prolog", None, Required, TaskProlog;
    "unbuffered", Some('u'), None, Unbuffered;
    "wait", Some('W'), Required, WaitSecs;
    "x11", None, Optional, X11;
};

/// The long name of an option.
pub fn long_name(opt: Opt) -> &'static str {
    SBATCH_OPTIONS
        .iter()
        .chain(LAUNCH_ONLY)
        .find(|d| d.key == opt)
        .map_or("?", |d| d.long)
}

/// `--nodes=min[-max]`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NodeRange {
    pub min: u32,
    /// `None` where Slurm leaves the maximum open (never from `--nodes` itself, which sets
    /// it to the minimum when given one number).
    pub max: Option<u32>,
}

/// `--exclusive[=...]`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Exclusive {
    /// Whole nodes.
    Node,
    /// Nodes shared only with the user's own jobs.
    User,
    Mcs,
    Topo,
}

/// `--signal=[{R|B}:]sig[@secs]`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SignalSpec {
    pub signal: i32,
    pub before_secs: u64,
    /// `B:`: the batch shell only.
    pub batch_only: bool,
}

/// `--switches=count[@max-wait]`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Switches {
    pub count: u32,
    pub max_wait_secs: Option<u64>,
}

/// The options of one submission.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchOptions {
    pub job_name: Option<String>,
    pub nodes: Option<NodeRange>,
    pub ntasks: Option<u32>,
    pub ntasks_per_node: Option<u32>,
    pub cpus_per_task: Option<u32>,
    pub mem_per_node: Option<u64>,
    pub mem_per_cpu: Option<u64>,
    pub mem_per_gpu: Option<u64>,
    /// `--gres=gpu...`; `Some(None)` for `--gres=none`.
    pub gres: Option<Option<GpuRequest>>,
    pub gpus: Option<GpuRequest>,
    pub gpus_per_node: Option<GpuRequest>,
    pub gpus_per_task: Option<GpuRequest>,
    pub cpus_per_gpu: Option<u32>,
    pub time: Option<TimeLimit>,
    pub time_min: Option<TimeLimit>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub reservation: Option<String>,
    pub constraint: Option<String>,
    pub exclusive: Option<Exclusive>,
    pub oversubscribe: bool,
    pub contiguous: bool,
    pub switches: Option<Switches>,
    /// Checked when the job is built (Slurm checks it in the controller).
    pub array: Option<String>,
    /// Checked when the job is built (Slurm checks it in the controller).
    pub dependency: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub input: Option<String>,
    pub chdir: Option<String>,
    pub export: Option<String>,
    pub signal: Option<SignalSpec>,
    pub requeue: Option<bool>,
    pub hold: bool,
    /// Seconds since the epoch.
    pub begin: Option<i64>,
    pub nice: Option<i32>,
    pub priority: Option<String>,
    pub wrap: Option<String>,
    pub parsable: bool,
    pub test_only: bool,
    pub wait: bool,
    pub quiet: bool,
    pub verbose: u32,
    pub comment: Option<String>,
    pub hint: Option<String>,
    pub wait_all_nodes: Option<bool>,
    pub open_append: Option<bool>,
    pub mail_type: Option<String>,
    pub mail_user: Option<String>,
    pub help: bool,
    pub usage: bool,
    pub version: bool,
    /// `srun --label`: each output line prefixed with its task's rank.
    pub label: bool,
    /// `srun --jobid`: run in this job's allocation.
    pub jobid: Option<String>,
    /// `salloc --no-shell`: allocate and exit.
    pub no_shell: bool,
    /// Accepted options with no effect on the job, by long name (flags as an empty value).
    pub recorded: BTreeMap<&'static str, String>,
}

fn positive(option: &'static str, value: &str) -> Result<u32, SlurmError> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 && n < i32::MAX as u32 => Ok(n),
        _ => Err(SlurmError::InvalidNumber {
            option,
            value: value.to_string(),
        }),
    }
}

/// A node count with Slurm's `k`/`m` multipliers.
fn node_count(text: &str) -> Option<u32> {
    let (digits, mult) = match text.chars().last()? {
        'k' | 'K' => (&text[..text.len() - 1], 1024),
        'm' | 'M' => (&text[..text.len() - 1], 1024 * 1024),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok()?.checked_mul(mult)
}

/// Parses `--nodes`.
pub fn parse_nodes(value: &str) -> Result<NodeRange, SlurmError> {
    let (min, max) = match value.split_once('-') {
        Some((a, b)) => (a, Some(b)),
        None => (value, None),
    };
    let min = node_count(min).ok_or_else(|| SlurmError::InvalidNodeCount(value.to_string()))?;
    let max = match max {
        Some(b) => node_count(b).ok_or_else(|| SlurmError::InvalidNodeCount(b.to_string()))?,
        None => min,
    };
    if max < min {
        return Err(SlurmError::NodeRange { min, max });
    }
    Ok(NodeRange {
        min,
        max: Some(max),
    })
}

/// Linux signal numbers by name, without `SIG`.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ABRT", 6),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
];

/// Parses `--signal`.
pub fn parse_signal(value: &str) -> Result<SignalSpec, SlurmError> {
    let invalid = || SlurmError::InvalidSpec { option: "signal" };
    let (flags, rest) = match value.split_once(':') {
        Some((f, r)) => (f, r),
        None => ("", value),
    };
    if !flags.chars().all(|c| c == 'R' || c == 'B') {
        return Err(invalid());
    }
    let (sig, secs) = match rest.split_once('@') {
        Some((s, t)) => {
            let t: u64 = t.parse().map_err(|_| invalid())?;
            if t > 65_535 {
                return Err(invalid());
            }
            (s, t)
        }
        None => (rest, 60),
    };
    let signal = match sig.parse::<i32>() {
        Ok(n) if (1..=64).contains(&n) => n,
        Ok(_) => return Err(invalid()),
        Err(_) => {
            let upper = sig.to_ascii_uppercase();
            let name = upper.strip_prefix("SIG").unwrap_or(&upper);
            SIGNALS
                .iter()
                .find(|(s, _)| *s == name)
                .map(|(_, n)| *n)
                .ok_or_else(invalid)?
        }
    };
    Ok(SignalSpec {
        signal,
        before_secs: secs,
        batch_only: flags.contains('B'),
    })
}

/// Seconds of a Slurm duration (no rounding to minutes), as `--switches` waits take it;
/// no limit is 0.
fn duration_secs(text: &str) -> Option<u64> {
    parse_slurm_duration(text)
        .ok()
        .map(|d| d.map_or(0, |d| d.0))
}

const MAIL_TYPES: &[&str] = &[
    "NONE",
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "ALL",
    "INVALID_DEPEND",
    "STAGE_OUT",
    "TIME_LIMIT",
    "TIME_LIMIT_90",
    "TIME_LIMIT_80",
    "TIME_LIMIT_50",
    "ARRAY_TASKS",
];

const HINTS: &[&str] = &[
    "compute_bound",
    "memory_bound",
    "multithread",
    "nomultithread",
];

impl BatchOptions {
    /// Applies one option from any source, overriding what an earlier source set.
    pub fn set(&mut self, opt: Opt, value: Option<&str>, clock: &Clock) -> Result<(), SlurmError> {
        let v = value.unwrap_or("");
        let text = || Some(v.to_string());
        match opt {
            Opt::Account => self.account = text(),
            Opt::Array => self.array = text(),
            Opt::Begin => {
                self.begin =
                    Some(parse_begin(v, clock).ok_or(SlurmError::InvalidSpec { option: "begin" })?);
            }
            Opt::Chdir => self.chdir = text(),
            Opt::Comment => self.comment = text(),
            Opt::Constraint => self.constraint = text(),
            Opt::Contiguous => self.contiguous = true,
            Opt::CpusPerGpu => self.cpus_per_gpu = Some(positive("cpus-per-gpu", v)?),
            Opt::CpusPerTask => self.cpus_per_task = Some(positive("cpus-per-task", v)?),
            Opt::Dependency => self.dependency = text(),
            Opt::Error => self.error = text(),
            Opt::Exclusive => {
                self.exclusive = Some(match value {
                    None => Exclusive::Node,
                    Some("user") => Exclusive::User,
                    Some("mcs") => Exclusive::Mcs,
                    Some("topo") => Exclusive::Topo,
                    Some(_) => {
                        return Err(SlurmError::InvalidSpec {
                            option: "exclusive",
                        });
                    }
                });
            }
            Opt::Export => self.export = Some(value.unwrap_or("ALL").to_string()),
            Opt::Gpus => self.gpus = Some(parse_gpus(v)?),
            Opt::GpusPerNode => self.gpus_per_node = Some(parse_gpus(v)?),
            Opt::GpusPerTask => self.gpus_per_task = Some(parse_gpus(v)?),
            Opt::Gres => self.gres = Some(parse_gres(v)?),
            Opt::Help => self.help = true,
            Opt::Hint => {
                if !HINTS.contains(&v) {
                    return Err(SlurmError::Refused(format!(
                        "unrecognized --hint argument \"{v}\", see --hint=help"
                    )));
                }
                self.hint = text();
            }
            Opt::Hold => self.hold = true,
            Opt::Input => self.input = text(),
            Opt::JobName => self.job_name = text(),
            Opt::MailType => {
                let ok = !v.is_empty()
                    && v.split(',')
                        .all(|t| MAIL_TYPES.contains(&t.to_ascii_uppercase().as_str()));
                if !ok {
                    return Err(SlurmError::InvalidSpec {
                        option: "mail-type",
                    });
                }
                self.mail_type = Some(v.to_ascii_uppercase());
            }
            Opt::MailUser => self.mail_user = text(),
            Opt::Mem => {
                self.mem_per_node =
                    Some(parse_mib(v).ok_or(SlurmError::InvalidSpec { option: "mem" })?);
            }
            Opt::MemPerCpu => {
                self.mem_per_cpu = Some(parse_mib(v).ok_or(SlurmError::InvalidSpec {
                    option: "mem-per-cpu",
                })?);
            }
            Opt::MemPerGpu => {
                self.mem_per_gpu = Some(parse_mib(v).ok_or(SlurmError::InvalidSpec {
                    option: "mem-per-gpu",
                })?);
            }
            Opt::Nice => {
                self.nice = Some(match value {
                    None => 100,
                    Some(n) => match n.parse::<i32>() {
                        Ok(n) if n.unsigned_abs() <= 2_147_483_645 => n,
                        _ => {
                            return Err(SlurmError::InvalidNumber {
                                option: "nice",
                                value: n.to_string(),
                            });
                        }
                    },
                });
            }
            Opt::NoRequeue => self.requeue = Some(false),
            Opt::Requeue => self.requeue = Some(true),
            Opt::Nodes => self.nodes = Some(parse_nodes(v)?),
            Opt::Ntasks => self.ntasks = Some(positive("ntasks", v)?),
            Opt::NtasksPerNode => self.ntasks_per_node = Some(positive("ntasks-per-node", v)?),
            Opt::OpenMode => {
                let lower = v.to_ascii_lowercase();
                self.open_append = Some(if !lower.is_empty() && "append".starts_with(&lower) {
                    true
                } else if !lower.is_empty() && "truncate".starts_with(&lower) {
                    false
                } else {
                    return Err(SlurmError::InvalidSpec {
                        option: "open-mode",
                    });
                });
            }
            Opt::Output => self.output = text(),
            Opt::Oversubscribe => self.oversubscribe = true,
            Opt::Parsable => self.parsable = true,
            Opt::Partition => self.partition = text(),
            Opt::Priority => self.priority = text(),
            Opt::Qos => self.qos = text(),
            Opt::Quiet => self.quiet = true,
            Opt::Reservation => self.reservation = text(),
            Opt::Signal => self.signal = Some(parse_signal(v)?),
            Opt::Switches => {
                let (count, wait) = match v.split_once('@') {
                    Some((c, w)) => (c, Some(w)),
                    None => (v, None),
                };
                let count = count
                    .parse::<u32>()
                    .map_err(|_| SlurmError::InvalidNumber {
                        option: "switches",
                        value: v.to_string(),
                    })?;
                let max_wait_secs = match wait {
                    Some(w) => Some(
                        duration_secs(w).ok_or(SlurmError::InvalidSpec { option: "switches" })?,
                    ),
                    None => None,
                };
                self.switches = Some(Switches {
                    count,
                    max_wait_secs,
                });
            }
            Opt::TestOnly => self.test_only = true,
            Opt::Time => {
                self.time = Some(
                    parse_time_limit(v).map_err(|_| SlurmError::InvalidSpec { option: "time" })?,
                );
            }
            Opt::TimeMin => {
                self.time_min = Some(
                    parse_time_limit(v)
                        .map_err(|_| SlurmError::InvalidSpec { option: "time-min" })?,
                );
            }
            Opt::Usage => self.usage = true,
            Opt::Verbose => self.verbose += 1,
            Opt::Version => self.version = true,
            Opt::Wait => self.wait = true,
            Opt::WaitAllNodes => {
                self.wait_all_nodes = Some(match v {
                    "0" => false,
                    "1" => true,
                    _ => {
                        return Err(SlurmError::InvalidSpec {
                            option: "wait-all-nodes",
                        });
                    }
                });
            }
            Opt::Wrap => self.wrap = text(),
            Opt::Label => self.label = true,
            Opt::Jobid => self.jobid = text(),
            Opt::NoShell => self.no_shell = true,
            other => {
                self.recorded.insert(long_name(other), v.to_string());
            }
        }
        Ok(())
    }

    /// The checks between options, once every source is applied.
    pub fn check(&self) -> Result<(), SlurmError> {
        let mem_forms = [self.mem_per_node, self.mem_per_cpu, self.mem_per_gpu]
            .iter()
            .filter(|m| m.is_some())
            .count();
        if mem_forms > 1 {
            return Err(SlurmError::Fatal(
                "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.".into(),
            ));
        }
        if self.cpus_per_gpu.is_some() && self.cpus_per_task.is_some() {
            return Err(SlurmError::Refused(
                "--cpus-per-gpu is mutually exclusive with --cpus-per-task\nInvalid generic resource (gres) specification".into(),
            ));
        }
        if self.gpus_per_task.is_some() && self.gpus.is_none() && self.ntasks.is_none() {
            return Err(SlurmError::Refused(
                "Failed to validate job spec. --gpus-per-task used without either --gpus or -n/--ntasks is not allowed.\nInvalid generic resource (gres) specification".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCK: Clock = Clock {
        now: 1_795_269_697,
        utc_offset: 0,
    };

    fn set(opt: Opt, v: &str) -> Result<BatchOptions, SlurmError> {
        let mut o = BatchOptions::default();
        o.set(opt, Some(v), &CLOCK)?;
        Ok(o)
    }

    #[test]
    fn the_table_is_sorted_so_ambiguities_list_as_glibc_does() {
        let names: Vec<&str> = SBATCH_OPTIONS.iter().map(|d| d.long).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn node_counts_and_ranges() {
        assert_eq!(
            parse_nodes("2").unwrap(),
            NodeRange {
                min: 2,
                max: Some(2)
            }
        );
        assert_eq!(
            parse_nodes("2-3").unwrap(),
            NodeRange {
                min: 2,
                max: Some(3)
            }
        );
        assert_eq!(parse_nodes("1k").unwrap().min, 1024);
        assert_eq!(
            parse_nodes("abc").unwrap_err().to_string(),
            "\"abc\" is not a valid node count"
        );
        assert_eq!(
            parse_nodes("1-2-3").unwrap_err().to_string(),
            "\"2-3\" is not a valid node count"
        );
        assert_eq!(
            parse_nodes("3-2").unwrap_err().to_string(),
            "Maximum node count 2 is less than minimum node count 3"
        );
    }

    #[test]
    fn numbers_are_refused_with_exit_1() {
        for (opt, name) in [
            (Opt::Ntasks, "ntasks"),
            (Opt::CpusPerTask, "cpus-per-task"),
            (Opt::NtasksPerNode, "ntasks-per-node"),
            (Opt::CpusPerGpu, "cpus-per-gpu"),
        ] {
            for bad in ["x", "0", "-1"] {
                let e = set(opt, bad).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    format!("Invalid numeric value \"{bad}\" for --{name}.")
                );
                assert_eq!(e.exit_code(None), 1);
            }
        }
    }

    #[test]
    fn specifications_are_refused_with_exit_255() {
        for (opt, v, name) in [
            (Opt::Time, "abc", "time"),
            (Opt::TimeMin, "x", "time-min"),
            (Opt::Mem, "10X", "mem"),
            (Opt::MemPerCpu, "x", "mem-per-cpu"),
            (Opt::MemPerGpu, "x", "mem-per-gpu"),
            (Opt::Exclusive, "foo", "exclusive"),
            (Opt::Signal, "FOO", "signal"),
            (Opt::Begin, "foo", "begin"),
            (Opt::OpenMode, "foo", "open-mode"),
            (Opt::MailType, "foo", "mail-type"),
            (Opt::WaitAllNodes, "5", "wait-all-nodes"),
        ] {
            let e = set(opt, v).unwrap_err();
            assert_eq!(e.to_string(), format!("Invalid --{name} specification"));
            assert_eq!(e.exit_code(None), 255);
        }
    }

    #[test]
    fn signals() {
        let s = parse_signal("B:USR1@90").unwrap();
        assert_eq!((s.signal, s.before_secs, s.batch_only), (10, 90, true));
        let s = parse_signal("SIGTERM").unwrap();
        assert_eq!((s.signal, s.before_secs, s.batch_only), (15, 60, false));
        assert_eq!(parse_signal("RB:10@5").unwrap().signal, 10);
        assert!(parse_signal("USR1@70000").is_err());
        assert!(parse_signal("X:USR1").is_err());
    }

    #[test]
    fn values_of_their_own() {
        assert_eq!(
            set(Opt::Exclusive, "user").unwrap().exclusive,
            Some(Exclusive::User)
        );
        let mut o = BatchOptions::default();
        o.set(Opt::Exclusive, None, &CLOCK).unwrap();
        o.set(Opt::Nice, None, &CLOCK).unwrap();
        assert_eq!((o.exclusive, o.nice), (Some(Exclusive::Node), Some(100)));
        assert_eq!(
            set(Opt::OpenMode, "append").unwrap().open_append,
            Some(true)
        );
        assert_eq!(set(Opt::OpenMode, "t").unwrap().open_append, Some(false));
        assert_eq!(
            set(Opt::Hint, "foo").unwrap_err().to_string(),
            "unrecognized --hint argument \"foo\", see --hint=help"
        );
        assert_eq!(
            set(Opt::Switches, "2@10:00").unwrap().switches,
            Some(Switches {
                count: 2,
                max_wait_secs: Some(600)
            })
        );
        assert_eq!(
            set(Opt::Switches, "x").unwrap_err().to_string(),
            "Invalid numeric value \"x\" for --switches."
        );
        assert_eq!(
            set(Opt::MailType, "end,fail").unwrap().mail_type.as_deref(),
            Some("END,FAIL")
        );
        assert_eq!(
            set(Opt::GpuBind, "closest")
                .unwrap()
                .recorded
                .get("gpu-bind")
                .map(String::as_str),
            Some("closest")
        );
    }

    #[test]
    fn memory_forms_exclude_each_other_across_sources() {
        let mut o = set(Opt::Mem, "1G").unwrap();
        o.set(Opt::MemPerCpu, Some("2G"), &CLOCK).unwrap();
        let e = o.check().unwrap_err();
        assert_eq!(
            e.render("sbatch", "sbatch"),
            "sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive."
        );
        assert_eq!(e.exit_code(None), 1);
    }
}
