//! `sbatch`'s input environment variables (`SBATCH_TIMELIMIT`, `SBATCH_PARTITION`, ...):
//! each stands for an option, overrides the script's directives and is overridden by the
//! command line. Values are checked as the option's would be (an invalid
//! `SBATCH_TIMELIMIT` is an `Invalid --time specification`). A variable set to the empty
//! string still counts, as in Slurm (`SBATCH_JOB_NAME=` names the job with nothing).

use crate::options::Opt;

/// How a variable's value becomes the option's.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EnvForm {
    /// The value is the option's value.
    Value,
    /// The variable's presence sets a flag; its value is ignored.
    Flag,
    /// An option with an optional value: empty means none (`SBATCH_EXCLUSIVE`).
    Optional,
}

/// Every input variable, in the order they are applied (later ones win where two stand
/// for the same option: `SBATCH_HINT` over `SLURM_HINT`).
pub const SBATCH_ENV: &[(&str, Opt, EnvForm)] = &[
    ("SBATCH_ACCOUNT", Opt::Account, EnvForm::Value),
    ("SBATCH_ACCTG_FREQ", Opt::AcctgFreq, EnvForm::Value),
    ("SBATCH_ARRAY_INX", Opt::Array, EnvForm::Value),
    ("SBATCH_BATCH", Opt::Batch, EnvForm::Value),
    ("SBATCH_CLUSTERS", Opt::Clusters, EnvForm::Value),
    ("SLURM_CLUSTERS", Opt::Clusters, EnvForm::Value),
    ("SBATCH_CONSTRAINT", Opt::Constraint, EnvForm::Value),
    ("SBATCH_CONTAINER", Opt::Container, EnvForm::Value),
    ("SBATCH_CORE_SPEC", Opt::CoreSpec, EnvForm::Value),
    ("SBATCH_CPUS_PER_GPU", Opt::CpusPerGpu, EnvForm::Value),
    ("SBATCH_DEBUG", Opt::Verbose, EnvForm::Flag),
    ("SBATCH_DELAY_BOOT", Opt::DelayBoot, EnvForm::Value),
    ("SBATCH_DISTRIBUTION", Opt::Distribution, EnvForm::Value),
    ("SBATCH_ERROR", Opt::Error, EnvForm::Value),
    ("SBATCH_EXCLUSIVE", Opt::Exclusive, EnvForm::Optional),
    ("SBATCH_EXPORT", Opt::Export, EnvForm::Value),
    ("SBATCH_GET_USER_ENV", Opt::GetUserEnv, EnvForm::Optional),
    ("SBATCH_GPU_BIND", Opt::GpuBind, EnvForm::Value),
    ("SBATCH_GPU_FREQ", Opt::GpuFreq, EnvForm::Value),
    ("SBATCH_GPUS", Opt::Gpus, EnvForm::Value),
    ("SBATCH_GPUS_PER_NODE", Opt::GpusPerNode, EnvForm::Value),
    ("SBATCH_GPUS_PER_TASK", Opt::GpusPerTask, EnvForm::Value),
    ("SBATCH_GRES", Opt::Gres, EnvForm::Value),
    ("SBATCH_GRES_FLAGS", Opt::GresFlags, EnvForm::Value),
    ("SLURM_HINT", Opt::Hint, EnvForm::Value),
    ("SBATCH_HINT", Opt::Hint, EnvForm::Value),
    ("SBATCH_IGNORE_PBS", Opt::IgnorePbs, EnvForm::Flag),
    ("SBATCH_INPUT", Opt::Input, EnvForm::Value),
    ("SBATCH_JOB_NAME", Opt::JobName, EnvForm::Value),
    ("SBATCH_MEM_BIND", Opt::MemBind, EnvForm::Value),
    ("SBATCH_MEM_PER_CPU", Opt::MemPerCpu, EnvForm::Value),
    ("SBATCH_MEM_PER_GPU", Opt::MemPerGpu, EnvForm::Value),
    ("SBATCH_MEM_PER_NODE", Opt::Mem, EnvForm::Value),
    ("SBATCH_NETWORK", Opt::Network, EnvForm::Value),
    ("SBATCH_NO_KILL", Opt::NoKill, EnvForm::Flag),
    ("SBATCH_NO_REQUEUE", Opt::NoRequeue, EnvForm::Flag),
    ("SBATCH_OPEN_MODE", Opt::OpenMode, EnvForm::Value),
    ("SBATCH_OUTPUT", Opt::Output, EnvForm::Value),
    ("SBATCH_OVERCOMMIT", Opt::Overcommit, EnvForm::Flag),
    ("SBATCH_PARTITION", Opt::Partition, EnvForm::Value),
    ("SBATCH_POWER", Opt::Power, EnvForm::Value),
    ("SBATCH_PROFILE", Opt::Profile, EnvForm::Value),
    ("SBATCH_QOS", Opt::Qos, EnvForm::Value),
    ("SBATCH_REQ_SWITCH", Opt::Switches, EnvForm::Value),
    ("SBATCH_REQUEUE", Opt::Requeue, EnvForm::Flag),
    ("SBATCH_RESERVATION", Opt::Reservation, EnvForm::Value),
    ("SBATCH_SIGNAL", Opt::Signal, EnvForm::Value),
    ("SBATCH_SPREAD_JOB", Opt::SpreadJob, EnvForm::Flag),
    ("SBATCH_THREAD_SPEC", Opt::ThreadSpec, EnvForm::Value),
    (
        "SBATCH_THREADS_PER_CORE",
        Opt::ThreadsPerCore,
        EnvForm::Value,
    ),
    ("SBATCH_TIMELIMIT", Opt::Time, EnvForm::Value),
    ("SBATCH_TRES_PER_TASK", Opt::TresPerTask, EnvForm::Value),
    ("SBATCH_USE_MIN_NODES", Opt::UseMinNodes, EnvForm::Flag),
    ("SBATCH_WAIT", Opt::Wait, EnvForm::Flag),
    ("SBATCH_WAIT_ALL_NODES", Opt::WaitAllNodes, EnvForm::Value),
    ("SBATCH_WCKEY", Opt::Wckey, EnvForm::Value),
];

/// The options the environment gives, in application order.
pub fn env_options<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> Vec<(Opt, Option<String>)> {
    SBATCH_ENV
        .iter()
        .filter_map(|&(var, opt, form)| {
            let value = lookup(var)?;
            Some(match form {
                EnvForm::Value => (opt, Some(value.to_string())),
                EnvForm::Flag => (opt, None),
                EnvForm::Optional if value.is_empty() => (opt, None),
                EnvForm::Optional => (opt, Some(value.to_string())),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_become_options() {
        let env = [
            ("SBATCH_TIMELIMIT", "10"),
            ("SBATCH_REQUEUE", "whatever"),
            ("SBATCH_EXCLUSIVE", ""),
            ("SLURM_HINT", "multithread"),
            ("SBATCH_HINT", "nomultithread"),
            ("UNRELATED", "x"),
        ];
        let got = env_options(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| *v));
        assert_eq!(
            got,
            vec![
                (Opt::Exclusive, None),
                (Opt::Hint, Some("multithread".into())),
                (Opt::Hint, Some("nomultithread".into())),
                (Opt::Requeue, None),
                (Opt::Time, Some("10".into())),
            ]
        );
    }
}
