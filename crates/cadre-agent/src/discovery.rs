//! The node's hardware, as a [`NodeShape`] the scheduler can place on.
//!
//! Read from a root directory (`/` on a real node, a fake tree in tests):
//! - CPUs and NUMA domains: `sys/devices/system/node/node*/cpulist`. Without NUMA
//!   information, one domain holding the CPUs of `sys/devices/system/cpu/online`, else the
//!   `processor` lines of `proc/cpuinfo`, else (only when the root is `/`) the standard
//!   library's `available_parallelism`. Logical CPUs are counted, as Slurm counts CPUs; the
//!   shape's core ids are `0..n` in ascending kernel CPU number, and
//!   [`Discovery::os_cpus`] maps them back for pinning.
//! - Memory: `proc/meminfo` for the node, `node*/meminfo` for each domain (an even split
//!   when absent).
//! - RDMA NICs: `sys/class/infiniband/*/device/numa_node` (unknown, `-1`: domain 0).
//! - GPUs: NVML ([`crate::gpu`]), each one's NUMA domain from
//!   `sys/bus/pci/devices/<address>/numa_node`, else NVML's answer, else domain 0 (said in
//!   the report). Without GPUs, `emulate_gpus` emulated ones spread evenly over the
//!   domains, flagged by [`Discovery::gpus_emulated`]. Real GPUs always win: emulation is
//!   never mixed in with them.
//!
//! Domains are in ascending kernel node number; [`Discovery::numa_nodes`] keeps the
//! kernel's numbers. Not detected: MIG slices, NVLink topology, hyperthread siblings,
//! CPUs outside the agent's own affinity (a containerised agent may be offered fewer).

use crate::gpu::{self, GpuProbe};
use cadre_core::cluster::{GpuDevice, NicDevice, NodeShape, NumaDomain};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("failed to read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("failed to parse {}: {why}", path.display())]
    Parse { path: PathBuf, why: String },
    #[error("no CPUs found under {}", root.display())]
    NoCpus { root: PathBuf },
}

/// What to discover, and what to emulate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryOptions {
    /// Where `sys/` and `proc/` are: `/` on a real node.
    pub root: PathBuf,
    /// The shape's name.
    pub shape_name: String,
    /// GPUs to emulate when the node has none (`--gpus-per-node`).
    pub emulate_gpus: u32,
    pub emulated_model: String,
    pub emulated_mem_mib: u64,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        DiscoveryOptions {
            root: PathBuf::from("/"),
            shape_name: "local".into(),
            emulate_gpus: 0,
            emulated_model: "emulated".into(),
            emulated_mem_mib: 81_920,
        }
    }
}

/// What a GPU of the shape is, beyond what [`GpuDevice`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuDetail {
    pub index: u32,
    /// NVML's UUID, or `EMULATED-<i>`.
    pub uuid: String,
    /// Product name as NVML gives it.
    pub product: String,
    /// `None` for an emulated GPU.
    pub pci_bus_id: Option<String>,
    pub emulated: bool,
}

/// The node as discovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovery {
    pub shape: NodeShape,
    /// Kernel CPU number of each core id of the shape.
    pub os_cpus: Vec<u32>,
    /// Kernel NUMA node number of each domain of the shape.
    pub numa_nodes: Vec<u32>,
    /// One per GPU of the shape, in the same order.
    pub gpus: Vec<GpuDetail>,
    /// The shape's GPUs are emulated, not real.
    pub gpus_emulated: bool,
    /// What was found and what was emulated, one line per part, for logs and `sinfo`.
    pub report: Vec<String>,
}

/// Discovers the node, asking NVML for GPUs.
pub fn discover(opts: &DiscoveryOptions) -> Result<Discovery, DiscoveryError> {
    discover_with(opts, gpu::probe_nvml())
}

fn read(path: &Path) -> Result<String, DiscoveryError> {
    fs::read_to_string(path).map_err(|source| DiscoveryError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_opt(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// Parses a kernel CPU list (`0-3,8,10-11`; empty for none).
pub fn parse_cpulist(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// The `MemTotal` of a meminfo file (`/proc/meminfo` or a node's), in MiB.
pub fn parse_mem_total_mib(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = &line[line.find("MemTotal:")? + "MemTotal:".len()..];
        let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kib / 1024)
    })
}

/// Kernel NUMA node numbers present under `sys/devices/system/node`.
fn numa_node_ids(root: &Path) -> Vec<u32> {
    let dir = root.join("sys/devices/system/node");
    let mut ids: Vec<u32> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// CPUs when sysfs has no NUMA information, and where they came from.
fn flat_cpus(root: &Path) -> Result<(Vec<u32>, &'static str), DiscoveryError> {
    let online = root.join("sys/devices/system/cpu/online");
    if let Some(text) = read_opt(&online) {
        let cpus = parse_cpulist(&text).ok_or_else(|| DiscoveryError::Parse {
            path: online.clone(),
            why: format!("`{}` is not a CPU list", text.trim()),
        })?;
        return Ok((cpus, "sys/devices/system/cpu/online"));
    }
    if let Some(text) = read_opt(&root.join("proc/cpuinfo")) {
        let n = text
            .lines()
            .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
            .count() as u32;
        return Ok(((0..n).collect(), "proc/cpuinfo"));
    }
    if root == Path::new("/") {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        return Ok(((0..n).collect(), "available_parallelism"));
    }
    Ok((Vec::new(), "nothing"))
}

fn numa_of_sysfs(path: &Path) -> Option<i64> {
    read_opt(path)?.trim().parse().ok()
}

/// Discovers the node with the GPUs `probe` found (NVML on a real node; made up in tests).
pub fn discover_with(
    opts: &DiscoveryOptions,
    probe: GpuProbe,
) -> Result<Discovery, DiscoveryError> {
    let root = opts.root.as_path();
    let mut report = Vec::new();

    // CPUs and domains, by kernel numbers.
    let node_ids = numa_node_ids(root);
    let mut domains: Vec<(u32, Vec<u32>)> = Vec::new();
    let source = if node_ids.is_empty() {
        let (cpus, from) = flat_cpus(root)?;
        domains.push((0, cpus));
        format!("1 NUMA domain (no NUMA information; CPUs from {from})")
    } else {
        for &id in &node_ids {
            let path = root.join(format!("sys/devices/system/node/node{id}/cpulist"));
            let text = read(&path)?;
            let cpus = parse_cpulist(&text).ok_or_else(|| DiscoveryError::Parse {
                path: path.clone(),
                why: format!("`{}` is not a CPU list", text.trim()),
            })?;
            domains.push((id, cpus));
        }
        format!("{} NUMA domain(s) from sysfs", domains.len())
    };
    let mut os_cpus: Vec<u32> = domains.iter().flat_map(|(_, c)| c.clone()).collect();
    os_cpus.sort_unstable();
    os_cpus.dedup();
    if os_cpus.is_empty() {
        return Err(DiscoveryError::NoCpus {
            root: root.to_path_buf(),
        });
    }
    let core_of: BTreeMap<u32, u32> = os_cpus
        .iter()
        .enumerate()
        .map(|(core, &cpu)| (cpu, core as u32))
        .collect();
    report.push(format!("cpus: {} in {source}", os_cpus.len()));

    // Memory.
    let meminfo = root.join("proc/meminfo");
    let text = read(&meminfo)?;
    let mem_mib = parse_mem_total_mib(&text).ok_or_else(|| DiscoveryError::Parse {
        path: meminfo.clone(),
        why: "no MemTotal line".into(),
    })?;
    let n = domains.len() as u64;
    let mut numa: Vec<NumaDomain> = domains
        .iter()
        .map(|(id, cpus)| {
            let node_mem =
                read_opt(&root.join(format!("sys/devices/system/node/node{id}/meminfo")))
                    .and_then(|t| parse_mem_total_mib(&t));
            NumaDomain {
                cores: cpus
                    .iter()
                    .filter_map(|c| core_of.get(c).copied())
                    .collect(),
                gpus: Vec::new(),
                nics: Vec::new(),
                mem_mib: node_mem.unwrap_or(mem_mib / n),
            }
        })
        .collect();
    report.push(format!(
        "memory: {mem_mib} MiB ({})",
        numa.iter()
            .map(|d| format!("{} MiB", d.mem_mib))
            .collect::<Vec<_>>()
            .join(" + ")
    ));
    let numa_sum: u64 = numa.iter().map(|d| d.mem_mib).sum();
    if numa_sum.abs_diff(mem_mib) > mem_mib / 20 {
        // Seen in containers and VMs: the two files disagree. Both are kept as read; the
        // node total is what the scheduler books against.
        report.push(format!(
            "memory: the NUMA domains add up to {numa_sum} MiB, not the node's {mem_mib} MiB"
        ));
    }
    let numa_nodes: Vec<u32> = domains.iter().map(|(id, _)| *id).collect();
    let domain_of = |kernel_node: Option<i64>| -> Option<u16> {
        let k = u32::try_from(kernel_node?).ok()?;
        numa_nodes.iter().position(|&id| id == k).map(|p| p as u16)
    };

    // RDMA NICs.
    let mut nics: Vec<NicDevice> = Vec::new();
    let ib = root.join("sys/class/infiniband");
    let mut names: Vec<String> = fs::read_dir(&ib)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let numa_node = numa_of_sysfs(&ib.join(&name).join("device/numa_node"));
        nics.push(NicDevice {
            numa: domain_of(numa_node).unwrap_or(0),
            name,
        });
    }
    report.push(if nics.is_empty() {
        "rdma nics: none".to_string()
    } else {
        format!(
            "rdma nics: {}",
            nics.iter()
                .map(|n| format!("{} (numa {})", n.name, numa_nodes[usize::from(n.numa)]))
                .collect::<Vec<_>>()
                .join(", ")
        )
    });

    // GPUs: real ones, else emulated ones.
    let mut gpus: Vec<GpuDevice> = Vec::new();
    let mut details: Vec<GpuDetail> = Vec::new();
    report.extend(probe.notes.iter().map(|n| format!("gpus: {n}")));
    let gpus_emulated = probe.gpus.is_empty() && opts.emulate_gpus > 0;
    if !probe.gpus.is_empty() {
        for g in &probe.gpus {
            let sysfs = gpu::sysfs_pci_address(&g.pci_bus_id).and_then(|addr| {
                domain_of(numa_of_sysfs(
                    &root
                        .join("sys/bus/pci/devices")
                        .join(addr)
                        .join("numa_node"),
                ))
            });
            let domain = sysfs.or_else(|| domain_of(g.numa_node.map(i64::from)));
            if domain.is_none() {
                report.push(format!(
                    "gpus: NUMA node of GPU {} ({}) unknown; placed in domain 0",
                    g.index, g.pci_bus_id
                ));
            }
            gpus.push(GpuDevice {
                index: g.index,
                model: gpu::model_name(&g.name),
                mem_mib: g.mem_mib,
                numa: domain.unwrap_or(0),
            });
            details.push(GpuDetail {
                index: g.index,
                uuid: g.uuid.clone(),
                product: g.name.clone(),
                pci_bus_id: Some(g.pci_bus_id.clone()),
                emulated: false,
            });
        }
        report.push(format!(
            "gpus: {} found by NVML: {}",
            gpus.len(),
            probe
                .gpus
                .iter()
                .map(|g| format!("{} {} {} MiB", g.index, g.name, g.mem_mib))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if opts.emulate_gpus > 0 {
            report.push(format!(
                "gpus: {} emulated GPUs asked for but not used: the node has real ones",
                opts.emulate_gpus
            ));
        }
    } else if gpus_emulated {
        let g = opts.emulate_gpus;
        let d = numa.len() as u32;
        for i in 0..g {
            // Even contiguous blocks: the first `g % d` domains get one more.
            let (per, extra) = (g / d, g % d);
            let domain = if i < extra * (per + 1) {
                i / (per + 1)
            } else {
                extra + (i - extra * (per + 1)) / per.max(1)
            };
            gpus.push(GpuDevice {
                index: i,
                model: opts.emulated_model.clone(),
                mem_mib: opts.emulated_mem_mib,
                numa: domain as u16,
            });
            details.push(GpuDetail {
                index: i,
                uuid: format!("EMULATED-{i}"),
                product: format!("emulated {}", opts.emulated_model),
                pci_bus_id: None,
                emulated: true,
            });
        }
        report.push(format!(
            "gpus: {g} EMULATED ({}, {} MiB each) over {d} NUMA domain(s); no real GPU is behind them",
            opts.emulated_model, opts.emulated_mem_mib
        ));
    } else {
        report.push("gpus: none".to_string());
    }
    for (pos, g) in gpus.iter().enumerate() {
        numa[usize::from(g.numa)].gpus.push(pos as u32);
    }
    for (pos, n) in nics.iter().enumerate() {
        numa[usize::from(n.numa)].nics.push(pos as u32);
    }

    Ok(Discovery {
        shape: NodeShape {
            name: opts.shape_name.clone(),
            cores: os_cpus.len() as u32,
            mem_mib,
            numa,
            gpus,
            nics,
            named: Vec::new(),
        },
        os_cpus,
        numa_nodes,
        gpus: details,
        gpus_emulated,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::NvmlGpu;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// Two NUMA domains (CPUs 0-3 and 4-7, 16 and 15.5 GiB... as kernel nodes 0 and 2),
    /// two RDMA NICs, one on each, and a PCI device on node 2 for a made-up GPU.
    fn fake_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(
            r,
            "proc/meminfo",
            "MemTotal:       32505856 kB\nMemFree: 1 kB\n",
        );
        write(r, "sys/devices/system/node/node0/cpulist", "0-3\n");
        write(
            r,
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal:       16777216 kB\n",
        );
        write(r, "sys/devices/system/node/node2/cpulist", "4-5,6,7\n");
        write(
            r,
            "sys/devices/system/node/node2/meminfo",
            "Node 2 MemTotal:       15728640 kB\n",
        );
        write(r, "sys/class/infiniband/mlx5_1/device/numa_node", "2\n");
        write(r, "sys/class/infiniband/mlx5_0/device/numa_node", "0\n");
        write(r, "sys/class/infiniband/bnxt_re0/device/numa_node", "-1\n");
        write(r, "sys/bus/pci/devices/0000:3b:00.0/numa_node", "2\n");
        dir
    }

    fn opts(root: &Path) -> DiscoveryOptions {
        DiscoveryOptions {
            root: root.to_path_buf(),
            ..DiscoveryOptions::default()
        }
    }

    fn no_driver() -> GpuProbe {
        GpuProbe {
            gpus: Vec::new(),
            notes: vec!["no NVIDIA driver found (libnvidia-ml.so): 0 GPUs".into()],
        }
    }

    #[test]
    fn cpu_lists_and_meminfo_parse() {
        assert_eq!(parse_cpulist("0-2,5,7-8\n"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpulist("\n"), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("a"), None);
        assert_eq!(parse_mem_total_mib("MemTotal:  2048 kB\n"), Some(2));
        assert_eq!(parse_mem_total_mib("Node 1 MemTotal: 4096 kB"), Some(4));
        assert_eq!(parse_mem_total_mib("MemFree: 1 kB"), None);
    }

    #[test]
    fn a_fake_two_domain_node_is_read_whole() {
        let tree = fake_tree();
        let d = discover_with(&opts(tree.path()), no_driver()).unwrap();
        let s = &d.shape;
        assert_eq!(s.cores, 8);
        assert_eq!(s.mem_mib, 31_744);
        assert_eq!(d.numa_nodes, vec![0, 2]);
        assert_eq!(s.numa.len(), 2);
        assert_eq!(s.numa[0].cores, vec![0, 1, 2, 3]);
        assert_eq!(s.numa[1].cores, vec![4, 5, 6, 7]);
        assert_eq!((s.numa[0].mem_mib, s.numa[1].mem_mib), (16_384, 15_360));
        let nics: Vec<(&str, u16)> = s.nics.iter().map(|n| (n.name.as_str(), n.numa)).collect();
        assert_eq!(nics, vec![("bnxt_re0", 0), ("mlx5_0", 0), ("mlx5_1", 1)]);
        assert_eq!(s.numa[0].nics, vec![0, 1]);
        assert_eq!(s.numa[1].nics, vec![2]);
        assert!(s.gpus.is_empty() && !d.gpus_emulated);
        assert!(
            d.report
                .contains(&"gpus: no NVIDIA driver found (libnvidia-ml.so): 0 GPUs".into()),
            "{:?}",
            d.report
        );
        assert_eq!(d.os_cpus, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn emulated_gpus_spread_over_domains_and_say_so() {
        let tree = fake_tree();
        let o = DiscoveryOptions {
            emulate_gpus: 3,
            emulated_model: "h100".into(),
            ..opts(tree.path())
        };
        let d = discover_with(&o, no_driver()).unwrap();
        assert!(d.gpus_emulated);
        let numa: Vec<u16> = d.shape.gpus.iter().map(|g| g.numa).collect();
        assert_eq!(numa, vec![0, 0, 1]);
        assert_eq!(d.shape.numa[0].gpus, vec![0, 1]);
        assert_eq!(d.shape.numa[1].gpus, vec![2]);
        assert!(d.gpus.iter().all(|g| g.emulated && g.pci_bus_id.is_none()));
        assert!(
            d.report.iter().any(|l| l.contains("3 EMULATED (h100")),
            "{:?}",
            d.report
        );
        // More domains than GPUs, and an uneven split.
        for (g, want) in [
            (1, vec![0]),
            (5, vec![0, 0, 0, 1, 1]),
            (4, vec![0, 0, 1, 1]),
        ] {
            let o = DiscoveryOptions {
                emulate_gpus: g,
                ..opts(tree.path())
            };
            let d = discover_with(&o, no_driver()).unwrap();
            let numa: Vec<u16> = d.shape.gpus.iter().map(|g| g.numa).collect();
            assert_eq!(numa, want);
        }
    }

    #[test]
    fn real_gpus_get_their_numa_domain_from_sysfs_and_beat_emulation() {
        let tree = fake_tree();
        let gpu = |index: u32, bus: &str, numa: Option<u32>| NvmlGpu {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            mem_mib: 81_559,
            pci_bus_id: bus.into(),
            numa_node: numa,
        };
        let probe = GpuProbe {
            gpus: vec![
                gpu(0, "00000000:3B:00.0", None),
                gpu(1, "00000000:5E:00.0", Some(0)),
                gpu(2, "00000000:AF:00.0", None),
            ],
            notes: vec![],
        };
        let o = DiscoveryOptions {
            emulate_gpus: 8,
            ..opts(tree.path())
        };
        let d = discover_with(&o, probe).unwrap();
        assert!(!d.gpus_emulated);
        let numa: Vec<u16> = d.shape.gpus.iter().map(|g| g.numa).collect();
        assert_eq!(numa, vec![1, 0, 0]);
        assert_eq!(d.shape.gpus[0].model, "h100-80gb-hbm3");
        assert_eq!(d.gpus[1].uuid, "GPU-1");
        assert!(
            d.report
                .iter()
                .any(|l| l.contains("GPU 2 (00000000:AF:00.0) unknown"))
        );
        assert!(
            d.report
                .iter()
                .any(|l| l.contains("8 emulated GPUs asked for but not used"))
        );
    }

    #[test]
    fn without_numa_information_one_domain_holds_every_cpu() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "proc/meminfo", "MemTotal: 1048576 kB\n");
        write(
            r,
            "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: x\n\nprocessor\t: 1\n",
        );
        let d = discover_with(&opts(r), no_driver()).unwrap();
        assert_eq!(d.shape.cores, 2);
        assert_eq!(d.shape.numa.len(), 1);
        assert_eq!(d.shape.numa[0].mem_mib, 1024);
        assert!(
            d.report[0].contains("CPUs from proc/cpuinfo"),
            "{:?}",
            d.report
        );
        write(r, "sys/devices/system/cpu/online", "0,2-3\n");
        let d = discover_with(&opts(r), no_driver()).unwrap();
        assert_eq!(d.os_cpus, vec![0, 2, 3]);
        assert_eq!(d.shape.numa[0].cores, vec![0, 1, 2]);
    }

    #[test]
    fn a_tree_without_cpus_or_memory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = discover_with(&opts(dir.path()), no_driver()).unwrap_err();
        assert!(err.to_string().starts_with("no CPUs found under"), "{err}");
        write(dir.path(), "proc/cpuinfo", "processor : 0\n");
        let err = discover_with(&opts(dir.path()), no_driver()).unwrap_err();
        assert!(err.to_string().starts_with("failed to read "), "{err}");
        assert!(err.to_string().contains("proc/meminfo"), "{err}");
    }

    /// This machine: whatever it has, the shape is consistent, and without the NVIDIA
    /// driver there are no real GPUs but emulated ones on request.
    #[test]
    fn this_machine() {
        let d = discover(&DiscoveryOptions::default()).unwrap();
        assert!(d.shape.cores > 0);
        assert!(d.shape.mem_mib > 0);
        let all: usize = d.shape.numa.iter().map(|n| n.cores.len()).sum();
        assert_eq!(all, d.shape.cores as usize);
        assert_eq!(d.os_cpus.len(), d.shape.cores as usize);
        if !Path::new("/dev/nvidia0").exists() {
            assert!(d.shape.gpus.is_empty());
            let d = discover(&DiscoveryOptions {
                emulate_gpus: 2,
                ..DiscoveryOptions::default()
            })
            .unwrap();
            assert!(d.gpus_emulated);
            assert_eq!(d.shape.gpus.len(), 2);
        }
    }
}
