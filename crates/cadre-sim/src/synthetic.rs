//! Synthetic traces: many jobs with a realistic mix of sizes and durations, from a seed.
//!
//! Sizes follow the shape of the Philly trace (mostly 1-GPU jobs, a tail of multi-node
//! gangs up to 64 GPUs), durations are log-uniform from one minute to one day, and arrivals
//! are a Poisson process whose rate puts the offered load at `load` times the cluster's
//! GPUs. Accounts are drawn from 16 teams. The same seed gives the same trace.

use crate::trace::{ImportOptions, TraceJob};
use cadre_core::job::JobSpec;
use cadre_core::resources::TaskResources;
use cadre_core::time::{Dur, Time};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// GPUs per job and how often each size appears (per mille).
const SIZES: [(u32, u32); 8] = [
    (1, 600),
    (2, 110),
    (4, 110),
    (8, 130),
    (16, 30),
    (32, 12),
    (64, 6),
    (0, 2),
];

/// `count` jobs for a cluster of `cluster_gpus` GPUs at offered load `load`.
pub fn generate(
    count: usize,
    cluster_gpus: u64,
    load: f64,
    seed: u64,
    opts: &ImportOptions,
) -> Vec<TraceJob> {
    let mut rng = StdRng::seed_from_u64(seed);
    let total: u32 = SIZES.iter().map(|&(_, w)| w).sum();
    let (min_d, max_d) = (60f64.ln(), 86_400f64.ln());
    // Mean GPU-seconds per job, to set the arrival rate for the load asked.
    let mean_gpus: f64 = SIZES
        .iter()
        .map(|&(g, w)| f64::from(g.max(1)) * f64::from(w))
        .sum::<f64>()
        / f64::from(total);
    let mean_duration = (86_400.0 - 60.0) / (max_d - min_d);
    let rate = load.max(0.01) * cluster_gpus.max(1) as f64 / (mean_gpus * mean_duration);
    let mut now = 0f64;
    let mut jobs = Vec::with_capacity(count);
    for i in 0..count {
        now += -(1.0 - rng.random::<f64>()).ln() / rate;
        let mut pick = rng.random_range(0..total);
        let gpus = SIZES
            .iter()
            .find(|&&(_, w)| {
                if pick < w {
                    true
                } else {
                    pick -= w;
                    false
                }
            })
            .map_or(1, |&(g, _)| g);
        let duration = Dur(rng.random_range(min_d..max_d).exp().round() as u64);
        let account = format!("team{:02}", rng.random_range(0..16u32));
        let g = opts.gpus_per_node.max(1);
        let (tasks, per_task_gpus) = if gpus > g {
            (gpus.div_ceil(g), g)
        } else {
            (1, gpus)
        };
        let per_task = TaskResources {
            cpus: if per_task_gpus == 0 {
                4
            } else {
                4 * per_task_gpus
            },
            mem_mib: 16 * 1024 * u64::from(per_task_gpus.max(1)),
            gpus: per_task_gpus,
            ..TaskResources::default()
        };
        let mut spec = JobSpec::simple(
            &format!("{account}-u{}", i % 7),
            &account,
            tasks,
            per_task,
            opts.time_limit(duration),
        );
        spec.name = format!("synthetic-{gpus}g");
        spec.submit_time = Time(now as u64);
        if tasks > 1 {
            spec.groups[0].tasks_per_node = Some(1);
        }
        jobs.push(TraceJob {
            submit: Time(now as u64),
            duration,
            spec,
        });
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_trace_and_sizes_within_nodes() {
        let o = ImportOptions::default();
        let a = generate(500, 512, 0.9, 7, &o);
        assert_eq!(a, generate(500, 512, 0.9, 7, &o));
        assert_ne!(a, generate(500, 512, 0.9, 8, &o));
        assert!(a.windows(2).all(|w| w[0].submit <= w[1].submit));
        assert!(a.iter().all(|j| j.spec.groups[0].per_task.gpus <= 8));
        assert!(
            a.iter().any(|j| j.spec.groups[0].count > 1),
            "some multi-node gangs"
        );
        assert!(
            a.iter()
                .all(|j| j.duration.0 >= 60 && j.duration.0 <= 86_400)
        );
    }
}
