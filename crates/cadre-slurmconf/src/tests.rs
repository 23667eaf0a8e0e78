//! Unit tests of each construct and each error, on files held in memory under
//! `/etc/slurm`.

use super::*;
use crate::syntax::tests::MemFiles;
use cadre_core::cluster::{NodeAvail, NodeId};
use cadre_core::time::Dur;

fn files(list: &[(&str, &str)]) -> MemFiles {
    let owned: Vec<(String, &str)> = list
        .iter()
        .map(|(name, text)| (format!("/etc/slurm/{name}"), *text))
        .collect();
    let refs: Vec<(&str, &str)> = owned.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    MemFiles::with(&refs)
}

fn load_all(list: &[(&str, &str)]) -> Result<SlurmCluster, SlurmConfError> {
    load_with(Path::new("/etc/slurm/slurm.conf"), &files(list))
}

fn load(slurm_conf: &str) -> SlurmCluster {
    load_all(&[("slurm.conf", slurm_conf)]).unwrap_or_else(|e| panic!("{e}"))
}

fn error(list: &[(&str, &str)]) -> String {
    match load_all(list) {
        Ok(_) => panic!("loaded, but an error was expected"),
        Err(e) => e.to_string(),
    }
}

fn notes(c: &SlurmCluster) -> Vec<String> {
    c.notes.iter().map(ToString::to_string).collect()
}

const HEAD: &str = "ClusterName=Test\nGresTypes=gpu\n";

#[test]
fn a_small_gpu_cluster() {
    let c = load(&format!(
        "{HEAD}NodeName=gpu[01-04] Sockets=2 CoresPerSocket=16 ThreadsPerCore=2 \
         RealMemory=515000 Gres=gpu:a100:8 Features=a100,ib\n\
         PartitionName=gpu Nodes=ALL Default=YES MaxTime=2-00:00:00 State=UP\n"
    ));
    let cluster = &c.cluster;
    assert_eq!(cluster.name, "test", "Slurm lowercases the cluster name");
    assert_eq!(cluster.nodes.len(), 4);
    assert_eq!(cluster.shapes.len(), 1);
    let shape = &cluster.shapes[0];
    assert_eq!(shape.name, "64cpu-2numa-515000M-8xa100");
    assert_eq!(
        shape.cores, 64,
        "CPUs are threads, as Slurm's CPUs= counts them"
    );
    assert_eq!(shape.mem_mib, 515_000);
    assert_eq!(shape.numa.len(), 2);
    assert_eq!(shape.numa[0].cores, (0..32).collect::<Vec<_>>());
    assert_eq!(shape.numa[1].cores, (32..64).collect::<Vec<_>>());
    assert_eq!(shape.numa[0].mem_mib, 257_500);
    assert_eq!(shape.numa[0].gpus, vec![0, 1, 2, 3]);
    assert_eq!(shape.numa[1].gpus, vec![4, 5, 6, 7]);
    assert!(
        shape
            .gpus
            .iter()
            .all(|g| g.model == "a100" && g.mem_mib == 0)
    );
    assert_eq!(
        cluster
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>(),
        ["gpu01", "gpu02", "gpu03", "gpu04"]
    );
    assert_eq!(cluster.nodes[0].features, ["a100", "ib"]);
    let p = &cluster.partitions[0];
    assert!(p.default && p.up);
    assert_eq!(p.max_time, Some(Dur::days(2)));
    assert_eq!(p.nodes.len(), 4);
    assert_eq!(
        c.origin("gpu03").map(ToString::to_string).as_deref(),
        Some("/etc/slurm/slurm.conf:3")
    );
    assert!(c.notes.is_empty(), "{:?}", notes(&c));
    assert_eq!(c.files, [PathBuf::from("/etc/slurm/slurm.conf")]);
}

#[test]
fn node_defaults_apply_to_the_lines_after_them_and_add_up() {
    let c = load(&format!(
        "{HEAD}NodeName=early CPUs=2\n\
         NodeName=DEFAULT CPUs=8 RealMemory=1000\n\
         NodeName=a\n\
         NodeName=DEFAULT RealMemory=2000\n\
         NodeName=b\n\
         NodeName=c CPUs=4\n\
         PartitionName=p Nodes=ALL\n"
    ));
    let shape = |n: &str| {
        let id = c.cluster.node_id(n).expect("node");
        let s = c.cluster.shape(id);
        (s.cores, s.mem_mib)
    };
    assert_eq!(
        shape("early"),
        (2, 1),
        "RealMemory defaults to 1 MB as in Slurm"
    );
    assert_eq!(shape("a"), (8, 1000));
    assert_eq!(
        shape("b"),
        (8, 2000),
        "a later DEFAULT adds to the earlier one"
    );
    assert_eq!(shape("c"), (4, 2000));
}

#[test]
fn layouts_boards_sockets_cores_threads_and_cpus() {
    let case = |line: &str| {
        let c = load(&format!(
            "{HEAD}NodeName=n {line}\nPartitionName=p Nodes=n\n"
        ));
        let s = &c.cluster.shapes[0];
        (s.cores, s.numa.len())
    };
    assert_eq!(case("CPUs=8"), (8, 1), "CPUs alone: one domain");
    assert_eq!(case(""), (1, 1), "nothing: one CPU, as Slurm");
    assert_eq!(case("Procs=6"), (6, 1));
    assert_eq!(case("Sockets=2 CoresPerSocket=4"), (8, 2));
    assert_eq!(case("Sockets=2 CoresPerSocket=4 ThreadsPerCore=2"), (16, 2));
    assert_eq!(
        case("CPUs=8 Sockets=2 CoresPerSocket=4 ThreadsPerCore=2"),
        (8, 2),
        "CPUs as the core count schedules whole cores"
    );
    assert_eq!(case("Boards=2 SocketsPerBoard=2 CoresPerSocket=4"), (16, 4));
    assert_eq!(
        case("Boards=2 Sockets=2 CoresPerSocket=4"),
        (16, 4),
        "with Boards, Sockets counts per board"
    );
    assert_eq!(
        case("CPUs=64 CoresPerSocket=16 ThreadsPerCore=2"),
        (64, 2),
        "sockets inferred from CPUs"
    );
}

#[test]
fn memory_is_split_over_the_domains() {
    let c = load(&format!(
        "{HEAD}NodeName=n Sockets=4 CoresPerSocket=2 RealMemory=1003\nPartitionName=p Nodes=n\n"
    ));
    let s = &c.cluster.shapes[0];
    assert_eq!(s.mem_mib, 1003);
    assert!(s.numa.iter().all(|d| d.mem_mib == 250));
}

#[test]
fn gres_types_counts_and_named_resources() {
    let c = load(
        "ClusterName=x\nGresTypes=gpu,nvme,bandwidth\n\
         NodeName=n Sockets=2 CoresPerSocket=8 Gres=gpu:h100:2,gpu:l40s:1,nvme:4,bandwidth:2K\n\
         NodeName=m CPUs=4 Gres=gpu:3\n\
         PartitionName=p Nodes=ALL\n",
    );
    let n = c.cluster.shape(NodeId(0));
    let models: Vec<(u32, &str, u16)> = n
        .gpus
        .iter()
        .map(|g| (g.index, g.model.as_str(), g.numa))
        .collect();
    assert_eq!(
        models,
        [(0, "h100", 0), (1, "h100", 0), (2, "l40s", 1)],
        "types in order, spread evenly over the sockets"
    );
    assert_eq!(
        n.named,
        [("nvme".to_string(), 4), ("bandwidth".to_string(), 2048)]
    );
    assert_eq!(n.name, "16cpu-2numa-1M-2xh100-1xl40s-4nvme-2048bandwidth");
    let m = c.cluster.shape(NodeId(1));
    assert!(
        m.gpus.iter().all(|g| g.model.is_empty()),
        "untyped GPUs have no model"
    );
    assert_eq!(m.name, "4cpu-1M-3xgpu");
}

#[test]
fn gres_conf_files_and_cores_place_gpus_on_their_sockets() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nGresTypes=gpu\n\
             NodeName=n[1-2] Sockets=2 CoresPerSocket=4 ThreadsPerCore=2 Gres=gpu:a100:4\n\
             PartitionName=p Nodes=ALL\n",
        ),
        (
            "gres.conf",
            "# GPUs 0 and 1 on the second socket, 2 and 3 on the first\n\
             Name=gpu Type=a100 File=/dev/nvidia[0-1] Cores=4-7\n\
             Name=gpu Type=a100 File=/dev/nvidia[2-3] Cores=0-3\n",
        ),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.cluster.shapes.len(), 1);
    let s = &c.cluster.shapes[0];
    let placed: Vec<(u32, u16)> = s.gpus.iter().map(|g| (g.index, g.numa)).collect();
    assert_eq!(placed, [(0, 1), (1, 1), (2, 0), (3, 0)]);
    assert_eq!(s.numa[0].gpus, vec![2, 3]);
    assert_eq!(s.numa[1].gpus, vec![0, 1]);
    assert_eq!(
        c.files,
        [
            PathBuf::from("/etc/slurm/slurm.conf"),
            PathBuf::from("/etc/slurm/gres.conf")
        ]
    );
}

#[test]
fn gres_conf_node_scoping_makes_shapes_differ() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nGresTypes=gpu\n\
             NodeName=tux[0-3] Sockets=2 CoresPerSocket=2 Gres=gpu:4\n\
             PartitionName=p Nodes=ALL\n",
        ),
        (
            "gres.conf",
            "NodeName=tux[0-2] Name=gpu File=/dev/nvidia[0-3]\n\
             NodeName=tux3 Name=gpu File=/dev/nvidia[0,2-4]\n",
        ),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.cluster.shapes.len(), 2);
    let indices = |n: u32| -> Vec<u32> {
        c.cluster
            .shape(NodeId(n))
            .gpus
            .iter()
            .map(|g| g.index)
            .collect()
    };
    assert_eq!(indices(0), [0, 1, 2, 3]);
    assert_eq!(
        indices(3),
        [0, 2, 3, 4],
        "device numbers from the file names"
    );
    assert_eq!(c.cluster.shapes[0].name, "4cpu-2numa-1M-4xgpu");
    assert_eq!(c.cluster.shapes[1].name, "4cpu-2numa-1M-4xgpu-2");
}

#[test]
fn gpus_without_affinity_go_where_there_are_fewest() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nGresTypes=gpu\n\
             NodeName=n Sockets=2 CoresPerSocket=2 Gres=gpu:4\n\
             PartitionName=p Nodes=ALL\n",
        ),
        (
            "gres.conf",
            "Name=gpu File=/dev/nvidia0 Cores=0-1\n\
             Name=gpu File=/dev/nvidia1 Cores=0-1\n\
             Name=gpu File=/dev/nvidia2 Cores=0-3\n\
             Name=gpu File=/dev/nvidia3\n",
        ),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let placed: Vec<u16> = c.cluster.shapes[0].gpus.iter().map(|g| g.numa).collect();
    assert_eq!(
        placed,
        [0, 0, 1, 1],
        "cores spanning both sockets say nothing"
    );
}

#[test]
fn gres_conf_counts_older_cpus_and_autodetect() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nGresTypes=gpu,nvme\n\
             NodeName=n Sockets=2 CoresPerSocket=2 ThreadsPerCore=2 Gres=gpu:tesla:2,nvme:2\n\
             NodeName=auto CPUs=4 Gres=gpu:2\n\
             PartitionName=p Nodes=ALL\n",
        ),
        (
            "gres.conf",
            "AutoDetect=off\n\
             NodeName=n Name=gpu Type=Tesla Count=2 CPUs=4-7\n\
             NodeName=n Name=nvme Count=2\n\
             NodeName=auto AutoDetect=nvml\n",
        ),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let n = c.cluster.shape(NodeId(0));
    let placed: Vec<(u32, &str, u16)> = n
        .gpus
        .iter()
        .map(|g| (g.index, g.model.as_str(), g.numa))
        .collect();
    assert_eq!(
        placed,
        [(0, "tesla", 1), (1, "tesla", 1)],
        "CPUs= counts CPU ids"
    );
    assert_eq!(c.cluster.shape(NodeId(1)).gpus.len(), 2);
    assert_eq!(
        notes(&c),
        [
            "/etc/slurm/gres.conf:4: NodeName=auto: AutoDetect=nvml: GPUs are counted from \
          slurm.conf's Gres and gres.conf's lines; cadre's agents find their GPUs through \
          NVML themselves"
        ]
    );
}

#[test]
fn node_states_reasons_and_down_nodes() {
    let c = load(&format!(
        "{HEAD}NodeName=a State=UNKNOWN Reason=ignored\n\
         NodeName=b State=DRAIN Reason=\"fan failed\"\n\
         NodeName=c State=DOWN\n\
         NodeName=d State=FAIL\n\
         NodeName=e,f\n\
         DownNodes=e State=DRAIN Reason=\"bad dimm\"\n\
         DownNodes=f\n\
         PartitionName=p Nodes=ALL\n"
    ));
    let state = |n: &str| {
        let node = c.cluster.node(c.cluster.node_id(n).expect("node"));
        (node.avail, node.reason.clone())
    };
    assert_eq!(state("a"), (NodeAvail::Up, None));
    assert_eq!(state("b"), (NodeAvail::Drain, Some("fan failed".into())));
    assert_eq!(state("c"), (NodeAvail::Down, None));
    assert_eq!(state("d"), (NodeAvail::Drain, None));
    assert_eq!(state("e"), (NodeAvail::Drain, Some("bad dimm".into())));
    assert_eq!(state("f"), (NodeAvail::Down, None));
    assert_eq!(
        notes(&c),
        ["/etc/slurm/slurm.conf:3: NodeName=a: Reason is ignored: the node is not down or drained"]
    );
}

#[test]
fn partitions_in_order_with_their_settings() {
    let c = load(&format!(
        "{HEAD}NodeName=gpu[1-4],cpu[1-2]\n\
         NodeSet=gpus Nodes=gpu[1-4]\n\
         PartitionName=DEFAULT MaxTime=1-00:00:00 PriorityJobFactor=5\n\
         PartitionName=debug Nodes=gpu1,cpu1 Default=YES MaxTime=30:30 DefaultTime=10\n\
         PartitionName=train Nodes=gpus PriorityTier=10 DefaultTime=-1\n\
         PartitionName=old Nodes=cpu[2,1],cpu1 Priority=7 MaxTime=UNLIMITED State=DOWN\n\
         PartitionName=all Nodes=ALL AllowGroups=ALL MaxNodes=UNLIMITED OverSubscribe=NO\n"
    ));
    let parts = &c.cluster.partitions;
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["debug", "train", "old", "all"]);
    let debug = &parts[0];
    assert!(debug.default);
    assert_eq!(
        debug.max_time,
        Some(Dur::minutes(31)),
        "seconds round up to minutes"
    );
    assert_eq!(debug.default_time, Some(Dur::minutes(10)));
    assert_eq!((debug.priority_tier, debug.priority_job_factor), (1, 5));
    assert_eq!(debug.nodes, [NodeId(0), NodeId(4)]);
    let train = &parts[1];
    assert_eq!(train.max_time, Some(Dur::days(1)), "from the DEFAULT line");
    assert_eq!(train.default_time, None, "DefaultTime=-1 is no limit");
    assert_eq!((train.priority_tier, train.priority_job_factor), (10, 5));
    assert_eq!(train.nodes.len(), 4);
    let old = &parts[2];
    assert!(!old.up);
    assert_eq!(old.max_time, None);
    assert_eq!(
        (old.priority_tier, old.priority_job_factor),
        (7, 5),
        "PriorityJobFactor, even from DEFAULT, wins over the older Priority"
    );
    assert_eq!(
        old.nodes,
        [NodeId(4), NodeId(5)],
        "node order, duplicates dropped"
    );
    assert_eq!(parts[3].nodes.len(), 6);
    assert_eq!(
        parts[3].default_time,
        Some(Dur::days(1)),
        "without DefaultTime, MaxTime as in Slurm"
    );
    assert!(!parts[1].default && !parts[3].default);
}

#[test]
fn partition_states_drain_and_inactive_are_approximated_with_a_note() {
    let c = load(&format!(
        "{HEAD}NodeName=n\n\
         PartitionName=a Nodes=n State=DRAIN\n\
         PartitionName=b Nodes=n State=INACTIVE\n"
    ));
    assert!(c.cluster.partitions[0].up);
    assert!(!c.cluster.partitions[1].up);
    insta::assert_snapshot!(notes(&c).join("\n"));
}

#[test]
fn node_sets_by_feature() {
    let c = load(&format!(
        "{HEAD}NodeName=a[1-2] Features=big\nNodeName=b[1-2]\n\
         NodeSet=bigs Feature=big\n\
         PartitionName=p Nodes=bigs,b2\n"
    ));
    assert_eq!(
        c.cluster.partitions[0].nodes,
        [NodeId(0), NodeId(1), NodeId(3)]
    );
}

#[test]
fn keys_that_do_not_describe_the_cluster_are_ignored_and_those_set_elsewhere_noted() {
    let c = load(
        "ClusterName=ref\nSlurmctldHost=head(10.0.0.1)\nAuthType=auth/munge \
         StateSaveLocation=/var/spool/slurm\nSlurmdSpoolDir=/var/spool/slurmd/%n\n\
         SchedulerType=sched/backfill\nPriorityWeightFairshare=10000\nSlurmdTimeout=300\n\
         SelectTypeParameters=CR_Core_Memory\nLicenses=\n\
         NodeName=n CPUs=2 NodeHostname=localhost Port=17001 Weight=10 TmpDisk=100\n\
         PartitionName=p Nodes=n Hidden=YES TRESBillingWeights=CPU=1.0\n",
    );
    insta::assert_snapshot!(notes(&c).join("\n"));
}

#[test]
fn included_files_and_files_read() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nGresTypes=gpu\nInclude nodes.conf\nPartitionName=p Nodes=ALL\n",
        ),
        ("nodes.conf", "NodeName=n Gres=gpu:1\n"),
        ("gres.conf", "Include gres.d/n.conf\n"),
        ("gres.d/n.conf", "NodeName=n Name=gpu File=/dev/nvidia0\n"),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.origin("n").map(ToString::to_string).as_deref(),
        Some("/etc/slurm/nodes.conf:1")
    );
    let files: Vec<String> = c.files.iter().map(|f| f.display().to_string()).collect();
    assert_eq!(
        files,
        [
            "/etc/slurm/slurm.conf",
            "/etc/slurm/nodes.conf",
            "/etc/slurm/gres.conf",
            "/etc/slurm/gres.d/n.conf"
        ]
    );
}

#[test]
fn a_switch_tree() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nTopologyPlugin=topology/tree\nNodeName=n[1-8]\n\
             PartitionName=p Nodes=ALL\n",
        ),
        (
            "topology.conf",
            "SwitchName=s0 Nodes=n[1-4] LinkSpeed=100\nSwitchName=s1 Nodes=n[5-8]\n\
             SwitchName=top Switches=s[0-1]\n",
        ),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let sw = &c.cluster.switches;
    assert_eq!(sw.len(), 3);
    assert_eq!((sw[0].level, sw[2].level), (0, 1));
    assert_eq!(sw[0].parent, Some(cadre_core::cluster::SwitchId(2)));
    assert_eq!(sw[2].children.len(), 2);
    assert_eq!(sw[1].nodes.len(), 4);
    assert!(c.cluster.nodes.iter().all(|n| n.leaf.is_some()));
}

#[test]
fn blocks_and_block_sizes() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nTopologyPlugin=topology/block\nNodeName=n[1-8]\n\
             PartitionName=p Nodes=ALL\n",
        ),
        (
            "topology.conf",
            "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8\n",
        ),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.cluster.blocks.len(), 2);
    assert_eq!(c.cluster.block_sizes, [4, 8]);
    assert!(c.cluster.nodes.iter().all(|n| n.block.is_some()));
}

#[test]
fn topology_conf_without_a_topology_plugin_is_not_read() {
    let c = load_all(&[
        (
            "slurm.conf",
            "ClusterName=x\nNodeName=n\nPartitionName=p Nodes=n\n",
        ),
        ("topology.conf", "SwitchName=s Nodes=nobody\n"),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.cluster.switches.is_empty());
    assert_eq!(
        notes(&c),
        [
            "/etc/slurm/slurm.conf:1: /etc/slurm/topology.conf is not read: TopologyPlugin is \
          not topology/tree or topology/block"
        ]
    );
}

/// Every error, with its file, line and message, in one reviewed list.
#[test]
fn errors_name_file_line_and_key() {
    let node_gres = "ClusterName=x\nGresTypes=gpu\nNodeName=n Sockets=2 CoresPerSocket=2 \
                     Gres=gpu:a100:2\nPartitionName=p Nodes=n\n";
    let tree =
        "ClusterName=x\nTopologyPlugin=topology/tree\nNodeName=n[1-4]\nPartitionName=p Nodes=ALL\n";
    let block = "ClusterName=x\nTopologyPlugin=topology/block\nNodeName=n[1-4]\nPartitionName=p Nodes=ALL\n";
    let with = |body: &str| format!("ClusterName=x\nGresTypes=gpu\n{body}");
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        // slurm.conf as a whole
        ("no ClusterName", vec![("slurm.conf", "NodeName=n\nPartitionName=p Nodes=n\n".into())]),
        ("no nodes", vec![("slurm.conf", "ClusterName=x\nPartitionName=p Nodes=ALL\n".into())]),
        ("no partitions", vec![("slurm.conf", "ClusterName=x\nNodeName=n\n".into())]),
        ("ClusterName twice", vec![("slurm.conf", "ClusterName=x\nClusterName=y\n".into())]),
        ("unknown parameter", vec![("slurm.conf", with("SchedulerParameter=bf_continue\n"))]),
        ("refused parameter", vec![("slurm.conf", with("Licenses=matlab:4\n"))]),
        ("front-end nodes", vec![("slurm.conf", with("FrontendName=fe0\n"))]),
        ("NodeName not first", vec![("slurm.conf", with("CPUs=4 NodeName=n\n"))]),
        ("key twice on a line", vec![("slurm.conf", with("NodeName=n CPUs=4 cpus=8\n"))]),
        ("CPUs and Procs", vec![("slurm.conf", with("NodeName=n CPUs=4 Procs=4\n"))]),
        // nodes
        ("unknown node key", vec![("slurm.conf", with("NodeName=n Cpus_=4\n"))]),
        ("refused node key", vec![("slurm.conf", with("NodeName=n CoreSpecCount=2\n"))]),
        ("bad number", vec![("slurm.conf", with("NodeName=n CPUs=four\n"))]),
        ("zero CPUs", vec![("slurm.conf", with("NodeName=n CPUs=0\n"))]),
        ("bad hostlist", vec![("slurm.conf", with("NodeName=gpu[1-\n"))]),
        ("node named ALL", vec![("slurm.conf", with("NodeName=ALL\n"))]),
        ("duplicate node", vec![("slurm.conf", with("NodeName=n[1-3]\nNodeName=n2\nPartitionName=p Nodes=ALL\n"))]),
        ("sockets twice", vec![("slurm.conf", with("NodeName=n Sockets=2 SocketsPerBoard=2\n"))]),
        ("CPUs mismatch", vec![("slurm.conf", with("NodeName=n CPUs=12 Sockets=2 CoresPerSocket=4 ThreadsPerCore=2\n"))]),
        ("CPUs not whole sockets", vec![("slurm.conf", with("NodeName=n CPUs=10 CoresPerSocket=4\n"))]),
        ("too many CPUs", vec![("slurm.conf", with("NodeName=n Sockets=1024 CoresPerSocket=1024\n"))]),
        ("bad feature", vec![("slurm.conf", with("NodeName=n Features=a,b/c\n"))]),
        ("future node", vec![("slurm.conf", with("NodeName=n State=FUTURE\n"))]),
        ("bad node state", vec![("slurm.conf", with("NodeName=n State=ASLEEP\n"))]),
        ("down nodes unknown", vec![("slurm.conf", with("NodeName=n\nDownNodes=m\nPartitionName=p Nodes=n\n"))]),
        ("down nodes bad key", vec![("slurm.conf", with("NodeName=n\nDownNodes=n Weight=2\n"))]),
        // GRES
        ("gres not in GresTypes", vec![("slurm.conf", "ClusterName=x\nNodeName=n Gres=gpu:1\nPartitionName=p Nodes=n\n".into())]),
        ("gres not in a given GresTypes", vec![("slurm.conf", with("NodeName=n Gres=nvme:1\nPartitionName=p Nodes=n\n"))]),
        ("bad gres", vec![("slurm.conf", with("NodeName=n Gres=gpu\n"))]),
        ("bad gres count", vec![("slurm.conf", with("NodeName=n Gres=gpu:a100:x\n"))]),
        ("typed and untyped", vec![("slurm.conf", with("NodeName=n Gres=gpu:2,gpu:a100:2\n"))]),
        ("gres twice", vec![("slurm.conf", with("NodeName=n Gres=gpu:a100:2,gpu:a100:2\n"))]),
        ("mps", vec![("slurm.conf", with("NodeName=n Gres=gpu:1,mps:100\n"))]),
        ("no_consume", vec![("slurm.conf", with("NodeName=n Gres=bandwidth:no_consume:4\n"))]),
        ("typed non-gpu", vec![("slurm.conf", with("NodeName=n Gres=nvme:samsung:4\n"))]),
        ("socket affinity", vec![("slurm.conf", with("NodeName=n Gres=gpu:2(S:0)\n"))]),
        ("too many gpus", vec![("slurm.conf", with("NodeName=n Gres=gpu:2K\nPartitionName=p Nodes=n\n"))]),
        // gres.conf
        ("gres.conf count", vec![("slurm.conf", node_gres.into()), ("gres.conf", "\nName=gpu Type=a100 File=/dev/nvidia[0-2]\n".into())]),
        ("gres.conf type count", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu Type=a100 File=/dev/nvidia0\nName=gpu Type=v100 File=/dev/nvidia1\n".into())]),
        ("gres.conf untyped line", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu File=/dev/nvidia[0-1]\n".into())]),
        ("gres.conf file twice", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu Type=a100 File=/dev/nvidia0\nName=gpu Type=a100 File=/dev/nvidia0\n".into())]),
        ("gres.conf count and files", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu Type=a100 File=/dev/nvidia[0-1] Count=3\n".into())]),
        ("gres.conf cores out of range", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu Type=a100 File=/dev/nvidia[0-1] Cores=0-4\n".into())]),
        ("gres.conf bad cores", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu Type=a100 File=/dev/nvidia[0-1] Cores=0-x\n".into())]),
        ("gres.conf unknown node", vec![("slurm.conf", node_gres.into()), ("gres.conf", "NodeName=m Name=gpu Type=a100 File=/dev/nvidia[0-1]\n".into())]),
        ("gres.conf gres not on node", vec![("slurm.conf", "ClusterName=x\nGresTypes=gpu,nvme\nNodeName=n Gres=gpu:1\nPartitionName=p Nodes=n\n".into()), ("gres.conf", "Name=gpu File=/dev/nvidia0\nName=nvme Count=2\n".into())]),
        ("gres.conf gpu on a node without", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n\n")), ("gres.conf", "Name=gpu File=/dev/nvidia0\n".into())]),
        ("gres.conf MIG", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu Type=a100 MultipleFiles=/dev/nvidia[0-1]\n".into())]),
        ("gres.conf unknown key", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=gpu Type=a100 Files=/dev/nvidia[0-1]\n".into())]),
        ("gres.conf without Name", vec![("slurm.conf", node_gres.into()), ("gres.conf", "NodeName=n Type=a100\n".into())]),
        ("gres.conf autodetect", vec![("slurm.conf", node_gres.into()), ("gres.conf", "AutoDetect=magic\n".into())]),
        ("gres.conf mps", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=mps Count=100\n".into())]),
        ("gres.conf not in GresTypes", vec![("slurm.conf", node_gres.into()), ("gres.conf", "Name=nic Count=1\n".into())]),
        // partitions
        ("unknown partition key", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n MaxWall=1\n"))]),
        ("refused partition key", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n AllowAccounts=physics\n"))]),
        ("partition unknown node", vec![("slurm.conf", with("NodeName=n[1-2]\nPartitionName=p Nodes=n[1-3]\n"))]),
        ("empty partition", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=\n"))]),
        ("partition without nodes", vec![("slurm.conf", with("NodeName=n\nPartitionName=p\n"))]),
        ("duplicate partition", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n\nPartitionName=p Nodes=n\n"))]),
        ("two defaults", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n Default=YES\nPartitionName=q Nodes=n Default=yes\n"))]),
        ("bad Default", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n Default=maybe\n"))]),
        ("bad MaxTime", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n MaxTime=1:2:3:4\n"))]),
        ("zero MaxTime", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n MaxTime=0\n"))]),
        ("DefaultTime above MaxTime", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n MaxTime=1:00:00 DefaultTime=2:00:00\n"))]),
        ("bad partition state", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n State=OPEN\n"))]),
        ("PriorityTier too large", vec![("slurm.conf", with("NodeName=n\nPartitionName=p Nodes=n PriorityTier=70000\n"))]),
        ("bad partition name", vec![("slurm.conf", with("NodeName=n\nPartitionName=a,b Nodes=n\n"))]),
        ("node set named like a node", vec![("slurm.conf", with("NodeName=n\nNodeSet=n Nodes=n\nPartitionName=p Nodes=n\n"))]),
        ("node set twice", vec![("slurm.conf", with("NodeName=n\nNodeSet=s Nodes=n\nNodeSet=s Nodes=n\nPartitionName=p Nodes=s\n"))]),
        ("node set unknown key", vec![("slurm.conf", with("NodeSet=s Weight=1\n"))]),
        // topology
        ("unsupported topology plugin", vec![("slurm.conf", "ClusterName=x\nTopologyPlugin=topology/3d_torus\n".into())]),
        ("no topology.conf", vec![("slurm.conf", tree.into())]),
        ("topology.yaml", vec![("slurm.conf", tree.into()), ("topology.yaml", "- topology: t\n".into())]),
        ("block line under tree", vec![("slurm.conf", tree.into()), ("topology.conf", "BlockName=b Nodes=n[1-4]\n".into())]),
        ("switch line under block", vec![("slurm.conf", block.into()), ("topology.conf", "SwitchName=s Nodes=n[1-4]\n".into())]),
        ("unknown topology line", vec![("slurm.conf", tree.into()), ("topology.conf", "Switch=s Nodes=n[1-4]\n".into())]),
        ("unknown switch key", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s Node=n[1-4]\n".into())]),
        ("switch both", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s Nodes=n[1-4] Switches=t\nSwitchName=t Nodes=n1\n".into())]),
        ("switch neither", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s\n".into())]),
        ("duplicate switch", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s Nodes=n[1-2]\nSwitchName=s Nodes=n[3-4]\n".into())]),
        ("switch unknown node", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s Nodes=n[1-5]\n".into())]),
        ("switch unknown switch", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s Nodes=n[1-4]\nSwitchName=top Switches=s,t\n".into())]),
        ("node under two leaves", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s0 Nodes=n[1-3]\nSwitchName=s1 Nodes=n[3-4]\n".into())]),
        ("switch under two parents", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s0 Nodes=n[1-4]\nSwitchName=a Switches=s0\nSwitchName=b Switches=s0\n".into())]),
        ("switch cycle", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s0 Nodes=n[1-4]\nSwitchName=a Switches=b\nSwitchName=b Switches=a\n".into())]),
        ("node under no leaf", vec![("slurm.conf", tree.into()), ("topology.conf", "SwitchName=s0 Nodes=n[1-3]\n".into())]),
        ("block without nodes", vec![("slurm.conf", block.into()), ("topology.conf", "BlockName=b\n".into())]),
        ("duplicate block", vec![("slurm.conf", block.into()), ("topology.conf", "BlockName=b Nodes=n[1-2]\nBlockName=b Nodes=n[3-4]\n".into())]),
        ("node in two blocks", vec![("slurm.conf", block.into()), ("topology.conf", "BlockName=a Nodes=n[1-2]\nBlockName=b Nodes=n[2-4]\n".into())]),
        ("bad block sizes", vec![("slurm.conf", block.into()), ("topology.conf", "BlockName=a Nodes=n[1-2]\nBlockSizes=2,3\n".into())]),
        ("block sizes not numbers", vec![("slurm.conf", block.into()), ("topology.conf", "BlockSizes=2,x\n".into())]),
        ("block sizes without blocks", vec![("slurm.conf", block.into()), ("topology.conf", "BlockSizes=2,4\n".into())]),
        ("block sizes twice", vec![("slurm.conf", block.into()), ("topology.conf", "BlockName=a Nodes=n[1-2]\nBlockSizes=2\nBlockSizes=2\n".into())]),
    ];
    let mut report = String::new();
    for (what, list) in cases {
        let refs: Vec<(&str, &str)> = list.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let text = match load_all(&refs) {
            Ok(_) => "LOADED (expected an error)".to_string(),
            Err(e) => e.to_string(),
        };
        report.push_str(&format!("{what}:\n  {text}\n"));
    }
    insta::assert_snapshot!(report);
}

#[test]
fn a_missing_slurm_conf_is_a_read_error() {
    let e = error(&[]);
    assert!(
        e.starts_with("failed to read /etc/slurm/slurm.conf: "),
        "{e}"
    );
}

/// Every key the lists accept, ignore or refuse is in `docs/slurm-conf.md`, so the
/// reference says what happens to each one.
#[test]
fn every_listed_key_is_documented() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/slurm-conf.md"),
    )
    .expect("docs/slurm-conf.md exists");
    let mut missing = Vec::new();
    for (kind, table) in [
        ("slurm.conf", keys::GLOBAL),
        ("NodeName", keys::NODE),
        ("PartitionName", keys::PARTITION),
    ] {
        for (list, _) in table {
            for key in *list {
                if !doc.contains(&format!("`{key}`")) {
                    missing.push(format!("{kind} {key}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "not in docs/slurm-conf.md: {missing:?}");
}
