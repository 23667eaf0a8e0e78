//! What cadre does with each key of `slurm.conf` that it does not read as part of the
//! cluster: the explicit lists of keys that are accepted and ignored, accepted with a note
//! saying where cadre sets the same thing, and refused. A key in none of the lists is an
//! error ("unknown key"), so a typo or a parameter of a newer Slurm is never silently
//! dropped.
//!
//! The lists are the reference for `docs/slurm-conf.md`; a test keeps the two in step.

/// What to do with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Read as part of the cluster description.
    Used,
    /// Does not describe the cluster (daemons, paths, authentication, logging, timeouts
    /// of Slurm's own machinery): accepted and ignored.
    Ignored,
    /// Accepted and ignored with a note: cadre has its own way to set this, named here.
    Elsewhere(&'static str),
    /// Refused, unless the value is one of `harmless` (compared ignoring case), which
    /// changes nothing: it describes something cadre cannot do.
    Refused {
        why: &'static str,
        harmless: &'static [&'static str],
    },
}

const POLICY_SCHEDULER: &str = "cadre's scheduler is configured by the policy file \
     (`--policy`): the [backfill] section, and `strict_order` for sched/builtin";
const POLICY_PRIORITY: &str =
    "cadre's job priority is configured by the policy file's [priority] and [fairshare] sections";
const POLICY_PREEMPT: &str = "cadre's preemption is configured by the policy file's [preemption] section \
     (partition tiers, QOS, mode and grace time)";
const SELECT: &str = "cadre always allocates cores, memory and GPUs as consumable resources \
     (as select/cons_tres with CR_Core_Memory); how nodes are chosen is the policy's `placement`";
const DEF_MEM: &str =
    "a cadre job gets the CPUs and memory it asks for, with no default per CPU, GPU or node";
const ACCOUNTING: &str = "cadre keeps its accounting in its own store (`--database`); \
     associations and limits come from the policy file (`auto_associations`, [quotas])";
const PROLOG: &str = "each node's agent runs the site's prolog and epilog around a job's run \
     there (`cadre agent --prolog`, `--epilog`, `--prolog-timeout`), and the task prolog and \
     epilog as the user around each task (`--task-prolog`, `--task-epilog`); prologs on the \
     controller and srun's are not run";
const HEALTH: &str = "each node's agent runs the site's health check and its own checks \
     (`cadre agent --health-check-program`, `--health-check-interval`), and a failing one \
     drains the node until it passes; a node whose agent cannot renew its lease \
     (`--node-lease`) is down";
const UNKILLABLE: &str = "`cadre agent --kill-timeout` sets how long a task's processes may \
     outlive SIGKILL before its node is drained \"Kill task failed\"";
const POWER: &str = "cadre does not power nodes down or up";
const TIMEOUT: &str = "`cadre up --node-lease` (or `cadre server --node-lease`) sets the \
     agents' lease: an agent that cannot renew it stops its runs, and its node is down once the \
     lease and `--lease-margin` have passed since its last word";
const KILL_WAIT: &str =
    "cadre signals a job's tasks with SIGTERM at their end and SIGKILL 30 s later";
const OVER_TIME: &str = "cadre ends a job at its time limit";
const TOPOLOGY_PARAM: &str = "cadre's topology-aware placement has no such parameters: it \
     prefers the fewest switches and blocks, and a job's own options say what is required";
const BILLING: &str = "billing weights are the policy file's [billing] section";
const NODE_WEIGHT: &str =
    "cadre has no node weights; how nodes are chosen is the policy's `placement`";
const TMP_DISK: &str = "cadre does not track temporary disk";
const CPU_BIND: &str = "cadre binds each task to the cores it was allocated";
const HIDDEN: &str = "cadre lists every partition";
const LLN: &str = "how nodes are chosen is the policy's `placement`";
const GRACE: &str = "the grace time of preemption is the policy file's [preemption] section";
const ALTERNATE: &str = "cadre has no alternate partitions";

const PER_PARTITION_ACCESS: &str = "cadre has no per-partition access lists; every user may \
     use every partition (remove the key to accept that)";
const PER_PARTITION_LIMIT: &str = "cadre has no per-partition job size or memory limits \
     (remove the key to accept that; quotas are the policy file's [quotas])";

/// Keys, as Slurm's documentation spells them, and what happens to them.
pub(crate) type Table = &'static [(&'static [&'static str], Rule)];

/// Top-level keys of `slurm.conf` (not those of NodeName, PartitionName, NodeSet or
/// DownNodes lines).
pub(crate) const GLOBAL: Table = &[
    (&["ClusterName", "GresTypes", "TopologyPlugin"], Rule::Used),
    (
        &["SchedulerType", "SchedulerParameters", "SchedulerTimeSlice"],
        Rule::Elsewhere(POLICY_SCHEDULER),
    ),
    (
        &[
            "PriorityType",
            "PriorityWeightAge",
            "PriorityWeightAssoc",
            "PriorityWeightFairshare",
            "PriorityWeightJobSize",
            "PriorityWeightPartition",
            "PriorityWeightQOS",
            "PriorityWeightTRES",
            "PriorityMaxAge",
            "PriorityFavorSmall",
            "PriorityFlags",
            "PriorityDecayHalfLife",
            "PriorityCalcPeriod",
            "PriorityUsageResetPeriod",
            "PriorityParameters",
            "PrioritySiteFactorParameters",
            "PrioritySiteFactorPlugin",
            "FairShareDampeningFactor",
        ],
        Rule::Elsewhere(POLICY_PRIORITY),
    ),
    (
        &[
            "PreemptType",
            "PreemptMode",
            "PreemptExemptTime",
            "PreemptParameters",
        ],
        Rule::Elsewhere(POLICY_PREEMPT),
    ),
    (
        &["SelectType", "SelectTypeParameters"],
        Rule::Elsewhere(SELECT),
    ),
    (
        &[
            "DefMemPerCPU",
            "DefMemPerGPU",
            "DefMemPerNode",
            "DefCpuPerGPU",
        ],
        Rule::Elsewhere(DEF_MEM),
    ),
    (&["AccountingStorageEnforce"], Rule::Elsewhere(ACCOUNTING)),
    (
        &[
            "Prolog",
            "Epilog",
            "PrologSlurmctld",
            "EpilogSlurmctld",
            "TaskProlog",
            "TaskEpilog",
            "SrunProlog",
            "SrunEpilog",
            "PrologFlags",
            "PrologEpilogTimeout",
        ],
        Rule::Elsewhere(PROLOG),
    ),
    (
        &[
            "HealthCheckProgram",
            "HealthCheckInterval",
            "HealthCheckNodeState",
        ],
        Rule::Elsewhere(HEALTH),
    ),
    (
        &[
            "SuspendProgram",
            "ResumeProgram",
            "SuspendTime",
            "SuspendTimeout",
            "ResumeTimeout",
            "SuspendRate",
            "ResumeRate",
            "SuspendExcNodes",
            "SuspendExcParts",
            "SuspendExcStates",
            "ResumeFailProgram",
            "PowerParameters",
            "PowerPlugin",
        ],
        Rule::Elsewhere(POWER),
    ),
    (&["SlurmdTimeout"], Rule::Elsewhere(TIMEOUT)),
    (&["KillWait"], Rule::Elsewhere(KILL_WAIT)),
    (&["UnkillableStepTimeout"], Rule::Elsewhere(UNKILLABLE)),
    (&["OverTimeLimit"], Rule::Elsewhere(OVER_TIME)),
    (&["TopologyParam"], Rule::Elsewhere(TOPOLOGY_PARAM)),
    (
        &["MaxMemPerCPU", "MaxMemPerNode"],
        Rule::Refused {
            why: "cadre has no cluster-wide memory limit per CPU or node; jobs are limited \
                  by the nodes' memory (remove the key to accept that)",
            harmless: &["0", "UNLIMITED"],
        },
    ),
    (
        &["Licenses"],
        Rule::Refused {
            why: "cadre has no cluster-wide licenses",
            harmless: &[""],
        },
    ),
    (
        &["DisableRootJobs"],
        Rule::Refused {
            why: "cadre runs the jobs of every user, root included, as the user who submits them",
            harmless: &["NO", "0"],
        },
    ),
    (
        &["NodeFeaturesPlugins"],
        Rule::Refused {
            why: "cadre's node features are the ones the NodeName lines give; no plugin \
                  changes them",
            harmless: &[""],
        },
    ),
    (
        &[
            "AccountingStorageBackupHost",
            "AccountingStorageExternalHost",
            "AccountingStorageHost",
            "AccountingStorageLoc",
            "AccountingStorageParameters",
            "AccountingStoragePass",
            "AccountingStoragePort",
            "AccountingStorageTRES",
            "AccountingStorageType",
            "AccountingStorageUser",
            "AccountingStoreFlags",
            "AccountingStoreJobComment",
            "AcctGatherEnergyType",
            "AcctGatherFilesystemType",
            "AcctGatherInterconnectType",
            "AcctGatherInfinibandType",
            "AcctGatherNodeFreq",
            "AcctGatherProfileType",
            "AllowSpecResourcesUsage",
            "AuthAltParameters",
            "AuthAltTypes",
            "AuthInfo",
            "AuthType",
            "BackupAddr",
            "BackupController",
            "BatchStartTimeout",
            "BcastExclude",
            "BcastParameters",
            "BurstBufferType",
            "CacheGroups",
            "CheckpointType",
            "CliFilterPlugins",
            "CommunicationParameters",
            "CompleteWait",
            "ControlAddr",
            "ControlMachine",
            "CoreSpecPlugin",
            "CpuFreqDef",
            "CpuFreqGovernors",
            "CredType",
            "CryptoType",
            "DebugFlags",
            "DefaultStorageHost",
            "DefaultStorageLoc",
            "DefaultStoragePass",
            "DefaultStoragePort",
            "DefaultStorageType",
            "DefaultStorageUser",
            "DependencyParameters",
            "EioTimeout",
            "EnforcePartLimits",
            "EpilogMsgTime",
            "ExtSensorsFreq",
            "ExtSensorsType",
            "FastSchedule",
            "FederationParameters",
            "FirstJobId",
            "GetEnvTimeout",
            "GpuFreqDef",
            "GroupUpdateForce",
            "GroupUpdateTime",
            "HashPlugin",
            "InactiveLimit",
            "InteractiveStepOptions",
            "JobAcctGatherFrequency",
            "JobAcctGatherParams",
            "JobAcctGatherType",
            "JobCompHost",
            "JobCompLoc",
            "JobCompParams",
            "JobCompPass",
            "JobCompPort",
            "JobCompType",
            "JobCompUser",
            "JobContainerType",
            "JobFileAppend",
            "JobRequeue",
            "JobSubmitPlugins",
            "KeepAliveTime",
            "KillOnBadExit",
            "LaunchParameters",
            "LaunchType",
            "LogTimeFormat",
            "MailDomain",
            "MailProg",
            "MaxArraySize",
            "MaxDBDMsgs",
            "MaxJobCount",
            "MaxJobId",
            "MaxNodeCount",
            "MaxStepCount",
            "MaxTasksPerNode",
            "MCSParameters",
            "MCSPlugin",
            "MessageTimeout",
            "MinJobAge",
            "MpiDefault",
            "MpiParams",
            "PluginDir",
            "PlugStackConfig",
            "PrEpParameters",
            "PrEpPlugins",
            "PrivateData",
            "ProctrackType",
            "PropagatePrioProcess",
            "PropagateResourceLimits",
            "PropagateResourceLimitsExcept",
            "RebootProgram",
            "ReconfigFlags",
            "RequeueExit",
            "RequeueExitHold",
            "ResvEpilog",
            "ResvOverRun",
            "ResvProlog",
            "ReturnToService",
            "RoutePlugin",
            "ScronParameters",
            "SlurmSchedLogFile",
            "SlurmSchedLogLevel",
            "SlurmUser",
            "SlurmctldAddr",
            "SlurmctldDebug",
            "SlurmctldHost",
            "SlurmctldLogFile",
            "SlurmctldParameters",
            "SlurmctldPidFile",
            "SlurmctldPlugstack",
            "SlurmctldPort",
            "SlurmctldPrimaryOffProg",
            "SlurmctldPrimaryOnProg",
            "SlurmctldSyslogDebug",
            "SlurmctldTimeout",
            "SlurmdDebug",
            "SlurmdLogFile",
            "SlurmdParameters",
            "SlurmdPidFile",
            "SlurmdPort",
            "SlurmdSpoolDir",
            "SlurmdSyslogDebug",
            "SlurmdUser",
            "SrunPortRange",
            "StateSaveLocation",
            "SwitchParameters",
            "SwitchType",
            "TCPTimeout",
            "TaskPlugin",
            "TaskPluginParam",
            "TmpFS",
            "TrackWCKey",
            "TreeWidth",
            "UnkillableStepProgram",
            "UsePAM",
            "VSizeFactor",
            "WaitTime",
        ],
        Rule::Ignored,
    ),
];

/// Keys of NodeName lines.
pub(crate) const NODE: Table = &[
    (
        &[
            "NodeName",
            "CPUs",
            "Procs",
            "Boards",
            "SocketsPerBoard",
            "Sockets",
            "CoresPerSocket",
            "ThreadsPerCore",
            "RealMemory",
            "Gres",
            "Features",
            "AvailableFeatures",
            "State",
            "Reason",
        ],
        Rule::Used,
    ),
    // Addresses: cadre's agents connect to the controller, not the other way round.
    (
        &[
            "NodeHostname",
            "NodeAddr",
            "BcastAddr",
            "Port",
            "Comment",
            "Extra",
        ],
        Rule::Ignored,
    ),
    (&["Weight"], Rule::Elsewhere(NODE_WEIGHT)),
    (&["TmpDisk"], Rule::Elsewhere(TMP_DISK)),
    (&["CpuBind"], Rule::Elsewhere(CPU_BIND)),
    (&["TRESWeights"], Rule::Elsewhere(BILLING)),
    (
        &["CoreSpecCount", "CpuSpecList", "MemSpecLimit"],
        Rule::Refused {
            why: "cadre reserves no cores or memory for the system; lower CPUs or \
                  RealMemory instead",
            harmless: &["0", ""],
        },
    ),
    (
        &["ActiveFeatures"],
        Rule::Refused {
            why: "cadre has no changeable node features; give the features as Features=",
            harmless: &[],
        },
    ),
    (
        &["Topology"],
        Rule::Refused {
            why: "per-node topology (topology.yaml) is not read; describe the topology in \
                  topology.conf",
            harmless: &[],
        },
    ),
];

/// Keys of PartitionName lines.
pub(crate) const PARTITION: Table = &[
    (
        &[
            "PartitionName",
            "Nodes",
            "Default",
            "MaxTime",
            "DefaultTime",
            "State",
            "PriorityTier",
            "PriorityJobFactor",
            "Priority",
        ],
        Rule::Used,
    ),
    (&["Hidden"], Rule::Elsewhere(HIDDEN)),
    (&["LLN"], Rule::Elsewhere(LLN)),
    (
        &[
            "DefMemPerCPU",
            "DefMemPerGPU",
            "DefMemPerNode",
            "DefCpuPerGPU",
        ],
        Rule::Elsewhere(DEF_MEM),
    ),
    (&["OverTimeLimit"], Rule::Elsewhere(OVER_TIME)),
    (&["GraceTime"], Rule::Elsewhere(GRACE)),
    (&["PreemptMode"], Rule::Elsewhere(POLICY_PREEMPT)),
    (&["TRESBillingWeights"], Rule::Elsewhere(BILLING)),
    (&["SelectTypeParameters"], Rule::Elsewhere(SELECT)),
    (&["CpuBind"], Rule::Elsewhere(CPU_BIND)),
    (&["Alternate"], Rule::Elsewhere(ALTERNATE)),
    (
        &[
            "SuspendTime",
            "SuspendTimeout",
            "ResumeTimeout",
            "PowerDownOnIdle",
        ],
        Rule::Elsewhere(POWER),
    ),
    (
        &["AllowAccounts", "AllowGroups", "AllowQos", "AllocNodes"],
        Rule::Refused {
            why: PER_PARTITION_ACCESS,
            harmless: &["ALL"],
        },
    ),
    (
        &["DenyAccounts", "DenyQos"],
        Rule::Refused {
            why: PER_PARTITION_ACCESS,
            harmless: &[""],
        },
    ),
    (
        &["RootOnly", "ReqResv", "ExclusiveUser", "DisableRootJobs"],
        Rule::Refused {
            why: PER_PARTITION_ACCESS,
            harmless: &["NO"],
        },
    ),
    (
        &["MaxNodes", "MaxCPUsPerNode", "MaxCPUsPerSocket"],
        Rule::Refused {
            why: PER_PARTITION_LIMIT,
            harmless: &["UNLIMITED", "INFINITE"],
        },
    ),
    (
        &["MinNodes"],
        Rule::Refused {
            why: PER_PARTITION_LIMIT,
            harmless: &["0", "1"],
        },
    ),
    (
        &["MaxMemPerCPU", "MaxMemPerNode"],
        Rule::Refused {
            why: PER_PARTITION_LIMIT,
            harmless: &["0", "UNLIMITED"],
        },
    ),
    (
        &["OverSubscribe", "Shared"],
        Rule::Refused {
            why: "cadre shares a node's free cores and GPUs between jobs and never \
                  oversubscribes them; per-partition exclusive or oversubscribed nodes are \
                  not supported (a job asks for whole nodes with --exclusive)",
            harmless: &["NO"],
        },
    ),
    (
        &["QOS"],
        Rule::Refused {
            why: "cadre has no partition QOS; QOS are the policy file's [[qos]]",
            harmless: &[""],
        },
    ),
    (
        &["Topology"],
        Rule::Refused {
            why: "several topologies (topology.yaml) are not read; the topology of \
                  topology.conf is the whole cluster's",
            harmless: &[],
        },
    ),
];

/// The rule for `key` (any case) in `table`; `None` for a key the table does not know.
pub(crate) fn rule(table: Table, key: &str) -> Option<Rule> {
    table
        .iter()
        .find(|(keys, _)| keys.iter().any(|k| k.eq_ignore_ascii_case(key)))
        .map(|(_, rule)| *rule)
}

/// Whether `value` is one of the harmless values of a refused key (ignoring case).
pub(crate) fn is_harmless(harmless: &[&str], value: &str) -> bool {
    harmless
        .iter()
        .any(|h| h.eq_ignore_ascii_case(value.trim()))
}
