//! The trace importers on small inline samples, on the real traces in `shared/traces/`
//! (skipped with a note when that folder is not beside the repository), their error
//! messages, and the cadre JSON-lines round trip.

use cadre_core::job::JobSpec;
use cadre_core::time::{Dur, Time};
use cadre_sim::trace::{
    CPUS_PER_GPU, ImportOptions, MEM_MIB_PER_GPU, TraceError, TraceFormat, TraceJob, detect,
    import_file, import_str, pollux_duration, tiresias_cluster, tiresias_cluster_file, write_jsonl,
};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// A file of `shared/traces/`, or `None` (with a note) when it is not there.
fn shared(rel: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(rel);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "note: {} is missing; skipping this real-trace test",
            path.display()
        );
        None
    }
}

fn opts(gpus_per_node: u32) -> ImportOptions {
    ImportOptions {
        gpus_per_node,
        ..ImportOptions::default()
    }
}

fn err(text: &str, format: TraceFormat) -> String {
    match import_str(text, "t.csv", Some(format), &ImportOptions::default()) {
        Ok(jobs) => panic!("expected an error, got {} jobs", jobs.len()),
        Err(e) => e.to_string(),
    }
}

fn gpus(spec: &JobSpec) -> u64 {
    spec.amounts().gpus_ceil()
}

fn assert_ordered(jobs: &[TraceJob]) {
    assert_eq!(jobs.first().map(|j| j.submit), Some(Time(0)));
    assert!(jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
    assert!(jobs.iter().all(|j| j.spec.submit_time == j.submit));
}

const PHILLY: &str = "\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,16,47216.0,6214e9
2017-10-09 07:01:55,10.5,12,126.0,e13805
2017-10-09 06:13:04,100.0,8,800.0,6214e9

";

#[test]
fn philly_rows_become_jobs_sorted_and_shifted() {
    let jobs = import_str(PHILLY, "<inline>", None, &ImportOptions::default()).unwrap();
    assert_eq!(jobs.len(), 4);
    assert_ordered(&jobs);
    let submits: Vec<u64> = jobs.iter().map(|j| j.submit.0).collect();
    assert_eq!(submits, [0, 1, 2932, 2932]);
    // Equal submit times keep trace order: row 1 (philly-0) before row 3 (philly-2).
    let names: Vec<&str> = jobs.iter().map(|j| j.spec.name.as_str()).collect();
    assert_eq!(names, ["philly-1", "philly-3", "philly-0", "philly-2"]);

    // 16 GPUs on 8-GPU nodes: two whole-node tasks, one per node.
    let gang = &jobs[0];
    assert_eq!(gang.spec.account, "6214e9");
    assert_eq!(gang.spec.user, "6214e9");
    assert_eq!(gang.duration, Dur(2951));
    assert_eq!(gang.spec.time_limit, Dur(5940)); // 2 x 2951 s rounded up to minutes
    assert_eq!(gang.spec.groups.len(), 1);
    let g = &gang.spec.groups[0];
    assert_eq!((g.count, g.tasks_per_node, g.nodes), (2, Some(1), Some(2)));
    assert_eq!(g.per_task.gpus, 8);
    assert_eq!(g.per_task.cpus, 8 * CPUS_PER_GPU);
    assert_eq!(g.per_task.mem_mib, 8 * MEM_MIB_PER_GPU);
    assert!(gang.spec.one_task_per_node);

    // 8 GPUs fit one node: a single task.
    assert_eq!(jobs[1].spec.tasks(), 1);
    assert_eq!(jobs[1].spec.groups[0].per_task.gpus, 8);

    // 12 GPUs: one whole node and a task with the 4 left, exactly 12 GPUs in all.
    let uneven = &jobs[3];
    assert_eq!(uneven.duration, Dur(11)); // 10.5 s rounded up
    assert_eq!(gpus(&uneven.spec), 12);
    let shape: Vec<(u32, u32)> = uneven
        .spec
        .groups
        .iter()
        .map(|g| (g.count, g.per_task.gpus))
        .collect();
    assert_eq!(shape, [(1, 8), (1, 4)]);

    let single = &jobs[2];
    assert_eq!(single.spec.groups[0].per_task.gpus, 1);
    assert!(!single.spec.one_task_per_node);
}

#[test]
fn philly_gangs_follow_gpus_per_node() {
    let jobs = import_str(PHILLY, "<inline>", Some(TraceFormat::Philly), &opts(4)).unwrap();
    let g = &jobs[0].spec.groups[0];
    assert_eq!((g.count, g.per_task.gpus), (4, 4));
    assert_eq!(jobs[1].spec.groups[0].count, 2); // 8 GPUs on 4-GPU nodes
    assert_eq!(jobs[3].spec.groups.len(), 1); // 12 = 3 x 4, no remainder
}

#[test]
fn philly_errors_name_the_line_and_column() {
    let head = "timestamp,duration,num_gpus,gpu_time,cluster\n";
    let zero_gpus =
        format!("{head}2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 07:01:55,66.0,0,0,a\n");
    insta::assert_snapshot!("philly_zero_gpus", err(&zero_gpus, TraceFormat::Philly));
    let zero_duration = format!("{head}2017-10-09 07:01:55,0.0,1,0,a\n");
    insta::assert_snapshot!(
        "philly_zero_duration",
        err(&zero_duration, TraceFormat::Philly)
    );
    let bad_date = format!("{head}\n2017-02-30 07:01:55,5,1,5,a\n");
    insta::assert_snapshot!("philly_bad_date", err(&bad_date, TraceFormat::Philly));
    let short = format!("{head}2017-10-09 07:01:55,5,1,a\n");
    assert_eq!(
        err(&short, TraceFormat::Philly),
        "t.csv:2: expected 5 fields as in the header, found 4"
    );
    let no_cluster = "timestamp,duration,num_gpus,gpu_time\n";
    assert!(
        err(no_cluster, TraceFormat::Philly)
            .starts_with("t.csv:1: the header has no column `cluster`")
    );
    assert_eq!(
        err("", TraceFormat::Philly),
        "t.csv: the trace is empty (no header line)"
    );
}

#[test]
fn philly_real_trace() {
    let Some(path) = shared("philly/philly.csv") else {
        return;
    };
    let jobs = import_file(&path, None, &ImportOptions::default()).unwrap();
    // Every one of the 82,247 rows is a job; the only line left out is the blank last one.
    assert_eq!(jobs.len(), 82_247);
    assert_ordered(&jobs);
    // The first submit is 2017-09-04 10:30:41 (row 31,568), the last 2017-12-22 08:02:11.
    assert_eq!(jobs[0].duration, Dur(2_240_194));
    assert_eq!(jobs.last().map(|j| j.submit), Some(Time(9_408_690)));
    let accounts: BTreeSet<&str> = jobs.iter().map(|j| j.spec.account.as_str()).collect();
    assert_eq!(accounts.len(), 15);
    assert_eq!(
        jobs.iter().filter(|j| j.spec.account == "6214e9").count(),
        41_226
    );
    let multi_node: Vec<&TraceJob> = jobs.iter().filter(|j| gpus(&j.spec) > 8).collect();
    assert_eq!(multi_node.len(), 289);
    assert!(
        multi_node
            .iter()
            .all(|j| j.spec.one_task_per_node && j.spec.tasks() >= 2)
    );
    let gpu_seconds: u64 = jobs.iter().map(|j| gpus(&j.spec) * j.duration.0).sum();
    assert_eq!(gpu_seconds, 3_521_082_502); // 978,078 GPU-hours, as the trace says
    assert!(jobs.iter().all(|j| j.spec.time_limit.0 >= 2 * j.duration.0));
}

const TIRESIAS: &str = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\r\n\
0,1,10,606,vgg19,164,30\r\n\
1,8,40,133,vgg11,147,23\r\n\
2,2,10,157,inception4,127,26\r\n";

#[test]
fn tiresias_rows_become_jobs() {
    let jobs = import_str(TIRESIAS, "<inline>", None, &opts(4)).unwrap();
    assert_ordered(&jobs);
    let names: Vec<&str> = jobs.iter().map(|j| j.spec.name.as_str()).collect();
    assert_eq!(names, ["vgg19-0", "inception4-2", "vgg11-1"]);
    assert_eq!(jobs[2].submit, Time(30));
    assert_eq!(jobs[2].duration, Dur(147));
    let g = &jobs[2].spec.groups[0];
    assert_eq!((g.count, g.per_task.gpus, g.nodes), (2, 4, Some(2)));
    assert!(jobs.iter().all(|j| j.spec.account == "tiresias"));
}

#[test]
fn tiresias_real_trace() {
    let Some(path) = shared("tiresias/60_job.csv") else {
        return;
    };
    let jobs = import_file(&path, None, &opts(4)).unwrap();
    assert_eq!(jobs.len(), 60);
    assert_ordered(&jobs);
    let gpu_seconds: u64 = jobs.iter().map(|j| gpus(&j.spec) * j.duration.0).sum();
    assert_eq!(gpu_seconds, 26_624);
    // The ten 8-GPU jobs are two-node gangs on 4-GPU nodes.
    assert_eq!(jobs.iter().filter(|j| j.spec.tasks() == 2).count(), 10);
    assert_eq!(jobs.last().map(|j| j.submit), Some(Time(1779)));
}

#[test]
fn tiresias_specs_become_switch_trees() {
    let one = tiresias_cluster(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,16,4,128,254",
        "spec.csv",
    )
    .unwrap();
    assert_eq!(one.nodes.len(), 16);
    assert_eq!(one.total_gpus(), 64);
    assert_eq!(one.switches.len(), 1);
    assert_eq!(one.switches[0].nodes.len(), 16);
    assert_eq!(one.nodes[0].name, "node001");

    let tree = tiresias_cluster(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n4,32,8,128,256\n",
        "spec.csv",
    )
    .unwrap();
    assert_eq!(tree.nodes.len(), 128);
    assert_eq!(tree.total_gpus(), 1024);
    let leaves: Vec<_> = tree.switches.iter().filter(|s| s.level == 0).collect();
    assert_eq!(leaves.len(), 4);
    assert!(
        leaves
            .iter()
            .all(|s| s.nodes.len() == 32 && s.parent.is_some())
    );
    let spine: Vec<_> = tree.switches.iter().filter(|s| s.level == 1).collect();
    assert_eq!(spine.len(), 1);
    assert_eq!(spine[0].children.len(), 4);
    // A trace job's per-GPU CPUs and memory fit a full node of the spec.
    let cap = tree.shapes[0].capacity();
    assert!(u64::from(8 * CPUS_PER_GPU) <= cap.cpus && 8 * MEM_MIB_PER_GPU <= cap.mem_mib);

    let two_rows = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,1,4,40,256\n1,1,4,40,256\n";
    insta::assert_snapshot!(
        "tiresias_spec_two_rows",
        tiresias_cluster(two_rows, "spec.csv")
            .unwrap_err()
            .to_string()
    );
    let no_nodes =
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,0,4,40,256\n";
    insta::assert_snapshot!(
        "tiresias_spec_no_nodes",
        tiresias_cluster(no_nodes, "spec.csv")
            .unwrap_err()
            .to_string()
    );
}

#[test]
fn tiresias_real_specs() {
    for (file, nodes, gpus, switches) in [
        ("tiresias/cluster_spec.csv", 16, 64, 1),
        ("tiresias/n1g4.csv", 1, 4, 1),
        ("tiresias/n32g4.csv", 32, 128, 1),
        ("tiresias/n160g8.csv", 160, 1280, 6),
        ("tiresias/n256g8.csv", 256, 2048, 9),
    ] {
        let Some(path) = shared(file) else { continue };
        let c = tiresias_cluster_file(&path).unwrap();
        assert_eq!(
            (c.nodes.len(), c.total_gpus(), c.switches.len()),
            (nodes, gpus, switches),
            "{file}"
        );
        let cap = c.shapes[0].capacity();
        let per_node = cap.gpus_ceil() as u32;
        assert!(
            u64::from(per_node * CPUS_PER_GPU) <= cap.cpus,
            "{file}: cores per GPU"
        );
        assert!(
            u64::from(per_node) * MEM_MIB_PER_GPU <= cap.mem_mib,
            "{file}: memory per GPU"
        );
    }
}

const POLLUX: &str = "name,time,application,num_replicas,batch_size
cifar10-0,107,cifar10,6,2048
deepspeech2-1,110,deepspeech2,6,320
ncf-2,135,ncf,1,32768
imagenet-3,200,imagenet,48,6400
";

#[test]
fn pollux_rows_get_their_modelled_run_times() {
    let jobs = import_str(POLLUX, "<inline>", None, &opts(4)).unwrap();
    assert_ordered(&jobs);
    assert_eq!(jobs[0].spec.name, "cifar10-0");
    assert_eq!(jobs[0].duration, Dur(911));
    assert_eq!(jobs[2].duration, Dur(47));
    assert_eq!(jobs[2].submit, Time(28));
    // 6 replicas on 4-GPU nodes: one whole node and a task of 2 GPUs.
    assert_eq!(gpus(&jobs[0].spec), 6);
    assert_eq!(jobs[0].spec.groups.len(), 2);
    // 48 replicas: twelve whole 4-GPU nodes.
    assert_eq!(jobs[3].spec.groups[0].count, 12);
    assert_eq!(pollux_duration("cifar10", 16, 4096), Some(Dur(485)));
    assert_eq!(pollux_duration("cifar10", 16, 2048), None);
}

#[test]
fn pollux_unknown_configuration_is_an_error() {
    let text = "name,time,application,num_replicas,batch_size\nresnet-0,5,resnet,2,64\n";
    insta::assert_snapshot!(
        "pollux_unknown_configuration",
        err(text, TraceFormat::Pollux)
    );
}

#[test]
fn pollux_real_workloads() {
    let mut any = false;
    for (dir, jobs_each) in [("workloads", 160), ("workloads-2.0", 320)] {
        for n in 1..=8 {
            let Some(path) = shared(&format!("pollux-workloads/{dir}/workload-{n}.csv")) else {
                continue;
            };
            any = true;
            let jobs = import_file(&path, None, &opts(4)).unwrap();
            assert_eq!(jobs.len(), jobs_each, "{}", path.display());
            assert_ordered(&jobs);
            assert!(jobs.iter().all(|j| j.duration.0 > 0));
        }
    }
    if any {
        // Workload 6, the one of Pollux's testbed: its first job arrives at 53 s.
        let path = shared("pollux-workloads/workloads/workload-6.csv").unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        let jobs = import_str(&text, "w6", Some(TraceFormat::Pollux), &opts(4)).unwrap();
        assert_eq!(jobs[0].spec.name, "cifar10-0");
    }
}

#[test]
fn formats_have_names_and_are_detected_from_headers() {
    for f in TraceFormat::ALL {
        assert_eq!(f.to_string().parse::<TraceFormat>(), Ok(f));
    }
    assert_eq!("Philly".parse::<TraceFormat>(), Ok(TraceFormat::Philly));
    assert_eq!(
        "slurm".parse::<TraceFormat>().unwrap_err().to_string(),
        "unknown trace format `slurm`; expected one of philly, openb, tiresias, pollux, cadre"
    );
    assert_eq!(
        detect("timestamp,duration,num_gpus,gpu_time,cluster"),
        Some(TraceFormat::Philly)
    );
    assert_eq!(
        detect("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\r"),
        Some(TraceFormat::Tiresias)
    );
    assert_eq!(
        detect("name,time,application,num_replicas,batch_size"),
        Some(TraceFormat::Pollux)
    );
    assert_eq!(
        detect("name,cpu_milli,memory_mib,num_gpu,gpu_milli"),
        Some(TraceFormat::Openb)
    );
    assert_eq!(
        detect(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
        ),
        Some(TraceFormat::Openb)
    );
    assert_eq!(detect("sn,cpu_milli,memory_mib,gpu,model"), None);
    assert_eq!(detect(r#"{"submit": 0}"#), Some(TraceFormat::Cadre));
    assert_eq!(detect("timestamp,duration"), None);
    insta::assert_snapshot!(
        "undetectable_format",
        import_str("a,b,c\n1,2,3\n", "x.csv", None, &ImportOptions::default())
            .unwrap_err()
            .to_string()
    );
}

#[test]
fn missing_file_is_a_read_error() {
    let e = import_file(
        std::path::Path::new("/nonexistent/trace.csv"),
        None,
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, TraceError::Read { .. }));
    assert!(
        e.to_string()
            .starts_with("failed to read trace /nonexistent/trace.csv: ")
    );
}

#[test]
fn bad_options_are_refused() {
    let e = import_str(PHILLY, "t", Some(TraceFormat::Philly), &opts(0)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t: import option gpus_per_node must be positive, found 0"
    );
}

const CADRE: &str = r#"
{"submit": 100, "duration": 600, "spec": {"name": "train", "user": "ana", "account": "vision", "groups": [{"name": "worker", "count": 4, "per_task": {"gpus": 8, "cpus": 64}, "tasks_per_node": 1}], "topology": {"span": "one_leaf"}}}

{"submit": 40, "duration": 30, "spec": {"name": "eval", "user": "bo", "account": "nlp", "time_limit": 3600, "submit_time": 40, "qos": "high", "groups": [{"name": "task", "count": 1, "per_task": {"gpu_share_milli": 250}}]}}
"#;

#[test]
fn cadre_lines_become_jobs() {
    let jobs = import_str(CADRE, "jobs.jsonl", None, &ImportOptions::default()).unwrap();
    assert_ordered(&jobs);
    assert_eq!(jobs[0].spec.name, "eval");
    assert_eq!(jobs[0].spec.time_limit, Dur(3600)); // given
    assert_eq!(jobs[0].spec.qos.as_deref(), Some("high"));
    assert_eq!(jobs[1].submit, Time(60));
    assert_eq!(jobs[1].spec.time_limit, Dur(1200)); // filled: 2 x 600 s
    assert_eq!(jobs[1].spec.groups[0].tasks_per_node, Some(1));
    assert!(jobs[1].spec.preemptible); // serde default of JobSpec
}

#[test]
fn cadre_errors_name_the_line() {
    let e = |t: &str| err(t, TraceFormat::Cadre);
    insta::assert_snapshot!(
        "cadre_not_json",
        e("\n{\"submit\": 1, \"duration\": 2, \"spec\": {}\n")
    );
    insta::assert_snapshot!(
        "cadre_unknown_spec_key",
        e(
            r#"{"submit": 1, "duration": 2, "spec": {"name": "a", "user": "u", "account": "a", "groups": [], "gpus": 2}}"#
        )
    );
    insta::assert_snapshot!(
        "cadre_submit_time_differs",
        e(
            r#"{"submit": 1, "duration": 2, "spec": {"name": "a", "user": "u", "account": "a", "groups": [], "submit_time": 5}}"#
        )
    );
    assert_eq!(
        e(r#"{"submit": 1, "duration": 0, "spec": {}}"#),
        "t.csv:1: `duration` must be positive, found 0"
    );
    assert!(
        e(r#"{"submit": 1, "duration": 2, "spec": {}, "extra": 1}"#)
            .starts_with("t.csv:1: not a cadre trace line: column ")
    );
}

mod round_trip {
    use super::*;
    use cadre_core::job::{
        Dependency, DependencyKind, JobId, NetworkSpan, NumaPolicy, TaskGroup, TopologyReq,
    };
    use cadre_core::resources::TaskResources;
    use proptest::prelude::*;

    fn word() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_-]{0,8}"
    }

    fn group() -> impl Strategy<Value = TaskGroup> {
        (
            word(),
            1u32..64,
            proptest::option::of(1u32..64),
            (
                0u32..256,
                0u64..1 << 22,
                0u32..9,
                proptest::option::of(1u32..1000),
            ),
            proptest::option::of(word()),
            (0u32..4, proptest::collection::vec((word(), 1u64..9), 0..2)),
            proptest::option::of(1u32..9),
            proptest::option::of(1u32..9),
        )
            .prop_map(
                |(
                    name,
                    count,
                    min_count,
                    (cpus, mem_mib, gpus, share),
                    model,
                    (nics, named),
                    tpn,
                    nodes,
                )| {
                    TaskGroup {
                        name,
                        count,
                        min_count,
                        per_task: TaskResources {
                            cpus,
                            mem_mib,
                            gpus,
                            gpu_share_milli: share,
                            gpu_model: model,
                            nics,
                            named,
                        },
                        tasks_per_node: tpn,
                        nodes,
                    }
                },
            )
    }

    fn spec() -> impl Strategy<Value = JobSpec> {
        (
            (
                word(),
                word(),
                word(),
                proptest::option::of(word()),
                proptest::option::of(word()),
            ),
            (
                -100i32..100,
                60u64..1_000_000,
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            ),
            proptest::collection::vec(group(), 1..4),
            proptest::collection::vec((0u64..1000, 0usize..5), 0..3),
            (
                0usize..3,
                0usize..4,
                proptest::collection::vec(word(), 0..3),
            ),
        )
            .prop_map(
                |(
                    (name, user, account, partition, qos),
                    (nice, limit, hold, exclusive, preemptible),
                    groups,
                    deps,
                    (numa, span, features),
                )| {
                    let mut s =
                        JobSpec::simple(&user, &account, 1, TaskResources::default(), Dur(limit));
                    s.name = name;
                    s.partition = partition;
                    s.qos = qos;
                    s.nice = nice;
                    s.hold = hold;
                    s.exclusive = exclusive;
                    s.preemptible = preemptible;
                    s.groups = groups;
                    s.dependencies = deps
                        .into_iter()
                        .map(|(job, kind)| match kind {
                            0 => Dependency::Singleton,
                            1 => Dependency::On {
                                kind: DependencyKind::After,
                                job: JobId(job),
                            },
                            2 => Dependency::On {
                                kind: DependencyKind::AfterAny,
                                job: JobId(job),
                            },
                            3 => Dependency::On {
                                kind: DependencyKind::AfterOk,
                                job: JobId(job),
                            },
                            _ => Dependency::On {
                                kind: DependencyKind::AfterNotOk,
                                job: JobId(job),
                            },
                        })
                        .collect();
                    s.topology = TopologyReq {
                        numa: [NumaPolicy::None, NumaPolicy::Preferred, NumaPolicy::Strict][numa],
                        span: [
                            NetworkSpan::Any,
                            NetworkSpan::OneLeaf,
                            NetworkSpan::OneBlock,
                            NetworkSpan::MaxSwitches(2),
                        ][span],
                    };
                    s.features = features.clone();
                    s.node_selector = features.into_iter().map(|f| (f.clone(), f)).collect();
                    s
                },
            )
    }

    proptest! {
        #[test]
        fn write_jsonl_then_import_gives_the_same_jobs(
            raw in proptest::collection::vec((0u64..100_000, 1u64..1_000_000, spec()), 0..12)
        ) {
            let mut raw = raw;
            raw.sort_by_key(|r| r.0);
            let first = raw.first().map_or(0, |r| r.0);
            let jobs: Vec<TraceJob> = raw
                .into_iter()
                .map(|(submit, duration, mut spec)| {
                    spec.submit_time = Time(submit - first);
                    TraceJob { submit: Time(submit - first), duration: Dur(duration), spec }
                })
                .collect();
            let mut out = Vec::new();
            write_jsonl(&jobs, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            prop_assert_eq!(text.lines().count(), jobs.len());
            let back = import_str(&text, "rt", Some(TraceFormat::Cadre), &ImportOptions::default()).unwrap();
            prop_assert_eq!(back, jobs);
        }
    }

    #[test]
    fn philly_sample_converts_to_jsonl_and_back() {
        let jobs = import_str(PHILLY, "<inline>", None, &ImportOptions::default()).unwrap();
        let mut out = Vec::new();
        write_jsonl(&jobs, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            detect(text.lines().next().unwrap_or("")),
            Some(TraceFormat::Cadre)
        );
        let back = import_str(&text, "rt", None, &ImportOptions::default()).unwrap();
        assert_eq!(back, jobs);
    }
}

#[test]
fn cadre_lines_take_every_spec_field_of_the_format_reference() {
    let line = r#"{"submit": 0, "duration": 5, "spec": {"name": "a", "user": "u", "account": "acct", "partition": "gpu", "qos": "normal", "queue": "q", "priority_class": "high", "nice": 5, "begin": 10, "hold": true, "exclusive": true, "one_task_per_node": true, "dependencies_any": true, "preemptible": false, "requeue": "never", "dependencies": [{"on": {"kind": "afterok", "job": 3}}, "singleton"], "array": {"array_job": 7, "index": 2}, "topology": {"numa": "strict", "span": {"max_switches": 2}}, "features": ["a100"], "node_selector": [["zone", "a"]], "groups": [{"name": "w", "count": 2, "min_count": 1, "tasks_per_node": 1, "nodes": 2, "per_task": {"cpus": 1, "mem_mib": 2, "gpus": 1, "gpu_model": "a100", "nics": 1, "named": [["nvme", 2]]}}]}}"#;
    let jobs = import_str(line, "x", None, &ImportOptions::default()).unwrap();
    let s = &jobs[0].spec;
    assert_eq!(s.dependencies.len(), 2);
    assert_eq!(
        s.topology.span,
        cadre_core::job::NetworkSpan::MaxSwitches(2)
    );
    assert_eq!(s.groups[0].per_task.named, [("nvme".to_string(), 2)]);
    assert_eq!(s.time_limit, Dur(60));
    assert!(!s.preemptible && s.hold);
}
