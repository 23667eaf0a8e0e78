//! The node's health checks, as Slurm's `HealthCheckProgram` and more: what they find wrong
//! drains the node until a later run of them is clean.
//!
//! Given: the agent's [`HealthChecks`] (`--health-check-program`, `--health-check-interval`,
//! `--health-check-timeout`, `--health-min-free-mib`), what discovery found at the start
//! (how many real GPUs, which RDMA ports were up), and the controller's clock at each
//! welcome.
//!
//! Decided, each run (before the first hello, then every interval):
//! - the site's program, as the agent's user (root), with `SLURMD_NODENAME`, no standard
//!   input, killed with its process group at the timeout: failing (non-zero status, a
//!   signal, the timeout) is a problem, named by its first line of output;
//! - free space of the filesystem of the agent's state directory (where jobs' scripts and
//!   files go) below the minimum;
//! - GPUs: a node that started with real GPUs must still have as many through NVML (one
//!   fallen off the bus, or NVML gone), and each must be sound ([`gpu_problems`], on
//!   what [`crate::gpu::read_health`] reads): no uncorrectable ECC error since the driver
//!   loaded, no row remapping pending or failed (Ampere and later), no page retirement
//!   pending nor more than [`MAX_RETIRED_PAGES`] pages retired (before Ampere), no
//!   critical XID of [`DRAINING_XIDS`] since the agent started, and NVML not saying it is
//!   lost or needs a reset. A query the GPU does not support is not judged. Emulated GPUs
//!   are not checked; without NVML only the count is (it says why);
//! - RDMA: every port of `/sys/class/infiniband` that was `ACTIVE` at the start must still
//!   be;
//! - the clock (at each welcome): more than [`MAX_CLOCK_SKEW`] from the controller's.
//!
//! The problems found are joined into one reason (`; `), bounded to
//! [`MAX_REASON`] characters; `None` when there are none.
//!
//! An XID is an event, not a state: NVML tells it once, and cannot tell later whether the
//! GPU has been reset since. So a draining XID keeps its GPU failing until the agent
//! restarts. Every XID of the list needs a GPU reset or a reboot, and a GPU reset
//! (`nvidia-smi -r`) needs the agent stopped anyway (its NVML event set holds the device
//! open): the restart that follows the repair is what lifts the drain. The counters that
//! are states (ECC, rows, pages) lift it themselves once a reset clears them.
//!
//! Tested here on readings built in the tests (no GPU on CI); the NVML calls that make
//! the readings have not been run on GPUs by these tests.

use crate::gpu::{GpuHealthReading, XidLog};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most a node's clock may differ from its controller's.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5);

/// The longest reason sent, in characters.
pub const MAX_REASON: usize = 512;

/// The most retired pages a GPU (before Ampere) may have. The driver retires at most 64
/// pages of a GPU; past 60 little room is left to retire the next bad one, and the GPU
/// is due for replacement. Our choice, not a threshold read from NVIDIA's RMA policy.
pub const MAX_RETIRED_PAGES: u64 = 60;

/// The critical XIDs that drain a node: those after which the GPU needs a reset, a reboot
/// or a replacement, as NVIDIA's XID documentation (docs.nvidia.com/deploy/xid-errors)
/// and its dynamic page retirement and A100 memory error pages describe them. Not here:
/// the XIDs an application causes (13, 31, 43, 45: NVML reports them as critical too, but
/// the next job is not at risk), nor the rest, which NVIDIA's catalogue files under
/// restarting the application.
pub const DRAINING_XIDS: &[(u64, &str)] = &[
    (48, "double-bit ECC error"),
    (
        63,
        "ECC page retirement or row remapping recorded, pending a reset",
    ),
    (64, "ECC page retirement or row remapping failed"),
    (74, "NVLink error"),
    (79, "fallen off the bus"),
    (92, "high single-bit ECC error rate"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
    (119, "GSP RPC timeout"),
    (120, "GSP error"),
];

/// What to check, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthChecks {
    /// The site's program (Slurm's `HealthCheckProgram`); `None`: only the built-in checks.
    pub program: Option<PathBuf>,
    pub interval: Duration,
    /// How long the program may run.
    pub timeout: Duration,
    /// The least free space, in MiB, of the state directory's filesystem; 0: not checked.
    pub min_free_mib: u64,
}

impl Default for HealthChecks {
    /// Every 60 s, the program (if any) within 60 s, 100 MiB free at least.
    fn default() -> Self {
        HealthChecks {
            program: None,
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(60),
            min_free_mib: 100,
        }
    }
}

/// What the node was at the start, to hold it to, and the critical XIDs seen since.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Baseline {
    /// Real GPUs discovered (0: none, or emulated ones, which are not checked).
    pub gpus: usize,
    /// RDMA ports `ACTIVE` at the start, as `device/port`.
    pub rdma_ports: Vec<String>,
    /// Filled for the agent's life by a thread of its own when there are real GPUs.
    pub xids: XidLog,
}

impl Baseline {
    /// This node now: its RDMA ports under `sysfs_infiniband` (`/sys/class/infiniband`);
    /// with real GPUs, their XIDs watched from now on.
    pub fn of(gpus: usize, sysfs_infiniband: &Path) -> Baseline {
        Baseline {
            xids: if gpus > 0 {
                XidLog::watch()
            } else {
                XidLog::default()
            },
            gpus,
            rdma_ports: rdma_ports(sysfs_infiniband)
                .into_iter()
                .filter(|(_, active)| *active)
                .map(|(port, _)| port)
                .collect(),
        }
    }
}

impl HealthChecks {
    /// Runs every check now (blocking; the program for up to its timeout): what is wrong.
    pub fn run(&self, node: &str, state_dir: &Path, baseline: &Baseline) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(program) = &self.program
            && let Err(why) = run_program(program, node, self.timeout)
        {
            problems.push(why);
        }
        if self.min_free_mib > 0 {
            match free_mib(state_dir) {
                Ok(free) if free < self.min_free_mib => problems.push(format!(
                    "only {free} MiB free for jobs in {} (at least {} wanted)",
                    state_dir.display(),
                    self.min_free_mib
                )),
                Ok(_) => {}
                Err(e) => problems.push(format!(
                    "cannot read the free space of {}: {e}",
                    state_dir.display()
                )),
            }
        }
        if baseline.gpus > 0 {
            let probe = crate::gpu::probe_nvml();
            if let Some(p) = gpu_problem(baseline.gpus, probe.gpus.len(), &probe.notes) {
                problems.push(p);
            }
            problems.extend(gpu_problems(&crate::gpu::read_health(&baseline.xids)));
        }
        problems.extend(rdma_problems(
            &baseline.rdma_ports,
            &rdma_ports(Path::new("/sys/class/infiniband")),
        ));
        problems
    }
}

/// The problems as one reason for the controller, `None` when there are none.
pub fn reason(problems: &[String]) -> Option<String> {
    (!problems.is_empty()).then(|| {
        problems
            .join("; ")
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_REASON)
            .collect()
    })
}

/// A problem when the node's clock is off the controller's by more than [`MAX_CLOCK_SKEW`].
pub fn clock_problem(ours_ms: u64, controller_ms: u64) -> Option<String> {
    let skew = ours_ms.abs_diff(controller_ms);
    // The controller's clock comes in whole seconds: a second more is its rounding.
    (Duration::from_millis(skew) > MAX_CLOCK_SKEW + Duration::from_secs(1)).then(|| {
        let way = if ours_ms > controller_ms {
            "ahead of"
        } else {
            "behind"
        };
        format!(
            "this node's clock is {:.1} s {way} the controller's",
            skew as f64 / 1000.0
        )
    })
}

fn gpu_problem(expected: usize, found: usize, notes: &[String]) -> Option<String> {
    (found < expected).then(|| {
        let why = notes
            .first()
            .map_or_else(String::new, |n| format!(" ({n})"));
        format!("NVML finds {found} of the node's {expected} GPUs{why}")
    })
}

/// What is wrong with each GPU, one problem per GPU (`GPU 3 (GPU-8f2…): 2 uncorrectable
/// ECC errors since the driver loaded, …`). See the module doc for what is judged.
pub fn gpu_problems(readings: &[GpuHealthReading]) -> Vec<String> {
    readings
        .iter()
        .filter_map(|r| {
            let mut wrong = Vec::new();
            if let Some(why) = &r.unusable {
                wrong.push(format!("NVML says: {why}"));
            }
            match r.ecc_uncorrectable {
                Some(1) => wrong.push("1 uncorrectable ECC error since the driver loaded".into()),
                Some(n) if n > 1 => wrong.push(format!(
                    "{n} uncorrectable ECC errors since the driver loaded"
                )),
                _ => {}
            }
            if let Some(rows) = r.row_remapping {
                if rows.failed {
                    wrong.push("a row remapping failed (no spare rows left)".into());
                }
                if rows.pending {
                    wrong.push("rows wait to be remapped at its next reset".into());
                }
            }
            if let Some(pages) = r.page_retirement {
                if pages.pending {
                    wrong.push("pages wait to be retired at the next driver reload".into());
                }
                if pages.retired > MAX_RETIRED_PAGES {
                    wrong.push(format!(
                        "{} retired pages (at most {MAX_RETIRED_PAGES} wanted)",
                        pages.retired
                    ));
                }
            }
            let xids: Vec<String> = r
                .xids
                .iter()
                .filter_map(|x| {
                    DRAINING_XIDS
                        .iter()
                        .find(|(d, _)| d == x)
                        .map(|(d, what)| format!("XID {d} ({what})"))
                })
                .collect();
            if !xids.is_empty() {
                wrong.push(format!("{} since the agent started", xids.join(", ")));
            }
            (!wrong.is_empty())
                .then(|| format!("GPU {} ({}): {}", r.index, r.uuid, wrong.join(", ")))
        })
        .collect()
}

/// Each RDMA port under `root` (`device/port`) and whether it is `ACTIVE`.
fn rdma_ports(root: &Path) -> Vec<(String, bool)> {
    let mut ports = Vec::new();
    let Ok(devices) = std::fs::read_dir(root) else {
        return ports;
    };
    for dev in devices.flatten() {
        let Ok(list) = std::fs::read_dir(dev.path().join("ports")) else {
            continue;
        };
        for port in list.flatten() {
            let state = std::fs::read_to_string(port.path().join("state")).unwrap_or_default();
            ports.push((
                format!(
                    "{}/{}",
                    dev.file_name().to_string_lossy(),
                    port.file_name().to_string_lossy()
                ),
                state.contains("ACTIVE"),
            ));
        }
    }
    ports.sort();
    ports
}

fn rdma_problems(expected: &[String], now: &[(String, bool)]) -> Vec<String> {
    expected
        .iter()
        .filter(|p| !now.iter().any(|(q, active)| q == *p && *active))
        .map(|p| format!("RDMA port {p} is no longer active"))
        .collect()
}

fn free_mib(dir: &Path) -> Result<u64, nix::errno::Errno> {
    let st = nix::sys::statvfs::statvfs(dir)?;
    Ok(st.blocks_available() as u64 * st.fragment_size() as u64 / (1 << 20))
}

fn run_program(program: &Path, node: &str, timeout: Duration) -> Result<(), String> {
    let env = [("SLURMD_NODENAME", node.to_string())];
    let ran = crate::prolog::run_site_program(program, &env, timeout)
        .map_err(|e| format!("health check {} cannot start: {e}", program.display()))?;
    let Some(status) = ran.status else {
        return Err(format!(
            "health check {} did not end within {timeout:?}",
            program.display()
        ));
    };
    if status.success() {
        return Ok(());
    }
    let first = ran
        .output
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned);
    Err(first.unwrap_or_else(|| {
        format!(
            "health check {} failed ({})",
            program.display(),
            crate::prolog::how_it_ended(status)
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn program(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("check");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn the_site_s_program_fails_with_its_first_line_and_passes_with_status_zero() {
        let dir = tempfile::tempdir().unwrap();
        let checks = |body: &str| HealthChecks {
            program: Some(program(dir.path(), body)),
            // Long enough for a loaded machine; the hung case waits it out once.
            timeout: Duration::from_secs(2),
            min_free_mib: 0,
            ..HealthChecks::default()
        };
        let none = Baseline::default();
        assert_eq!(
            checks("echo; echo \"$SLURMD_NODENAME: /scratch not mounted\"; exit 1").run(
                "gpu7",
                dir.path(),
                &none
            ),
            vec!["gpu7: /scratch not mounted".to_string()]
        );
        assert!(checks("exit 0").run("gpu7", dir.path(), &none).is_empty());
        let hung = checks("sleep 30").run("gpu7", dir.path(), &none);
        assert!(hung[0].contains("did not end within"), "{hung:?}");
        assert!(checks("exit 4").run("gpu7", dir.path(), &none)[0].ends_with("(exit status 4)"));
    }

    #[test]
    fn too_little_free_space_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let checks = HealthChecks {
            min_free_mib: u64::MAX / 2,
            ..HealthChecks::default()
        };
        let found = checks.run("n1", dir.path(), &Baseline::default());
        assert!(
            found[0].starts_with("only ") && found[0].contains("MiB free"),
            "{found:?}"
        );
    }

    fn gpu(index: u32) -> GpuHealthReading {
        GpuHealthReading {
            index,
            uuid: format!("GPU-{index}"),
            ..GpuHealthReading::default()
        }
    }

    #[test]
    fn a_sound_gpu_or_one_whose_queries_are_not_supported_passes() {
        use crate::gpu::{PageRetirement, RowRemapping};
        let sound = GpuHealthReading {
            ecc_uncorrectable: Some(0),
            row_remapping: Some(RowRemapping {
                uncorrectable_rows: 3,
                pending: false,
                failed: false,
            }),
            page_retirement: Some(PageRetirement {
                retired: MAX_RETIRED_PAGES,
                pending: false,
            }),
            // An application's own fault (an illegal address) is not the GPU's.
            xids: vec![13, 31, 43],
            ..gpu(0)
        };
        // Nothing supported (a consumer GPU without ECC): nothing judged.
        let unsupported = gpu(1);
        assert_eq!(gpu_problems(&[sound, unsupported]), Vec::<String>::new());
        assert_eq!(gpu_problems(&[]), Vec::<String>::new());
    }

    #[test]
    fn uncorrectable_ecc_rows_pages_xids_and_a_lost_gpu_fail_naming_the_gpu() {
        use crate::gpu::{PageRetirement, RowRemapping};
        let readings = [
            GpuHealthReading {
                ecc_uncorrectable: Some(2),
                ..gpu(3)
            },
            GpuHealthReading {
                ecc_uncorrectable: Some(1),
                row_remapping: Some(RowRemapping {
                    uncorrectable_rows: 1,
                    pending: true,
                    failed: false,
                }),
                ..gpu(4)
            },
            GpuHealthReading {
                row_remapping: Some(RowRemapping {
                    failed: true,
                    ..RowRemapping::default()
                }),
                ..gpu(5)
            },
            GpuHealthReading {
                page_retirement: Some(PageRetirement {
                    retired: MAX_RETIRED_PAGES + 1,
                    pending: true,
                }),
                ..gpu(6)
            },
            GpuHealthReading {
                xids: vec![13, 79, 48],
                ..gpu(7)
            },
            GpuHealthReading {
                unusable: Some("the GPU has fallen off the bus".into()),
                ..gpu(8)
            },
        ];
        assert_eq!(
            gpu_problems(&readings),
            vec![
                "GPU 3 (GPU-3): 2 uncorrectable ECC errors since the driver loaded".to_string(),
                "GPU 4 (GPU-4): 1 uncorrectable ECC error since the driver loaded, rows wait to \
                 be remapped at its next reset"
                    .to_string(),
                "GPU 5 (GPU-5): a row remapping failed (no spare rows left)".to_string(),
                "GPU 6 (GPU-6): pages wait to be retired at the next driver reload, 61 retired \
                 pages (at most 60 wanted)"
                    .to_string(),
                "GPU 7 (GPU-7): XID 79 (fallen off the bus), XID 48 (double-bit ECC error) \
                 since the agent started"
                    .to_string(),
                "GPU 8 (GPU-8): NVML says: the GPU has fallen off the bus".to_string(),
            ]
        );
    }

    /// On this machine (no NVIDIA driver, on CI): no readings, and an XID log that stays
    /// empty, its thread ended; the GPU count check is what says NVML is missing.
    #[test]
    fn without_nvml_the_gpu_health_reads_nothing_and_fails_nothing() {
        if Path::new("/dev/nvidia0").exists() {
            return;
        }
        let log = XidLog::watch();
        let readings = crate::gpu::read_health(&log);
        assert!(readings.is_empty(), "{readings:?}");
        assert!(log.seen().is_empty());
        assert!(gpu_problems(&readings).is_empty());
    }

    #[test]
    fn gpus_rdma_ports_and_clocks_are_held_to_what_they_were() {
        assert_eq!(gpu_problem(8, 8, &[]), None);
        assert_eq!(
            gpu_problem(8, 7, &[]).as_deref(),
            Some("NVML finds 7 of the node's 8 GPUs")
        );
        assert!(
            gpu_problem(8, 0, &["NVML is not available".into()])
                .unwrap()
                .contains("(NVML is not available)")
        );
        // A sysfs tree of two ports: one active at the start, then down.
        let root = tempfile::tempdir().unwrap();
        for (dev, port, state) in [("mlx5_0", "1", "4: ACTIVE"), ("mlx5_1", "1", "1: DOWN")] {
            let dir = root.path().join(dev).join("ports").join(port);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("state"), state).unwrap();
        }
        let base = Baseline::of(0, root.path());
        assert_eq!(base.rdma_ports, vec!["mlx5_0/1".to_string()]);
        assert!(rdma_problems(&base.rdma_ports, &rdma_ports(root.path())).is_empty());
        std::fs::write(root.path().join("mlx5_0/ports/1/state"), "1: DOWN").unwrap();
        assert_eq!(
            rdma_problems(&base.rdma_ports, &rdma_ports(root.path())),
            vec!["RDMA port mlx5_0/1 is no longer active".to_string()]
        );
        assert_eq!(clock_problem(1_000_000, 1_005_900), None);
        assert_eq!(
            clock_problem(1_010_000, 1_000_000).as_deref(),
            Some("this node's clock is 10.0 s ahead of the controller's")
        );
        assert_eq!(
            reason(&["a".into(), "b\nc".into()]).as_deref(),
            Some("a; bc")
        );
        assert_eq!(reason(&[]), None);
    }
}
