//! Every manifest of `../shared/corpus/k8s` (real examples from the Kubeflow, Kueue and
//! Volcano projects), each with its expected outcome: the gang it becomes (groups, counts,
//! per-task CPUs, memory and GPUs), the queues it makes, or the specific reason it is
//! refused. A file added to the corpus, or a change of any file's outcome, fails the test.
//!
//! Queue objects are applied to a running controller now: the corpus's queue files make a
//! configuration the controller takes (flavors and topologies they name are there), and the
//! Kueue-labelled workloads are routed through their LocalQueue when it is applied. Those
//! of the corpus name `user-queue`, which Kueue's own setup file (not in the corpus)
//! defines: applied without it they are refused for that reason alone, and with it they
//! are routed.
//!
//! The corpus lives beside the repository (`../shared`); under CI (`CI` set) it must be
//! there, elsewhere the test says it skipped.

use cadre_k8s::{K8sError, TranslateOptions, plan};
use std::path::PathBuf;

/// One task group as expected: name, count, elastic minimum, cpus, MiB, GPUs per task.
type G = (&'static str, u32, Option<u32>, u32, u64, u32);

enum Expect {
    /// The workloads of the file: (name, groups).
    Gangs(&'static [(&'static str, &'static [G])]),
    /// Queue objects: cadre queue names and LocalQueue routes (namespace, name, queue).
    Queues(
        &'static [&'static str],
        &'static [(&'static str, &'static str, &'static str)],
    ),
    /// Refused: document number, then (field path, words of the reason) for each problem.
    Refused(usize, &'static [(&'static str, &'static str)]),
    /// A kind cadre does not read: document, kind, apiVersion, words of the hint.
    Unsupported(usize, &'static str, &'static str, &'static str),
}

use Expect::*;

const CORPUS: &[(&str, Expect)] = &[
    (
        "kueue__site_static_examples_admission-fs_admission-fair-sharing-setup.yaml",
        Refused(
            2,
            &[
                (
                    "spec.queueingStrategy",
                    "StrictFIFO per queue is not supported",
                ),
                (
                    "spec.admissionScope",
                    "admission fair sharing between LocalQueues",
                ),
            ],
        ),
    ),
    (
        "kueue__site_static_examples_jobs_sample-jobset-tas-required.yaml",
        Gangs(&[("jobset-tas-required", &[("workers", 4, None, 1, 200, 0)])]),
    ),
    (
        "kueue__site_static_examples_jobs_sample-jobset.yaml",
        Refused(1, &[("metadata.generateName", "needs metadata.name")]),
    ),
    (
        "kueue__site_static_examples_jobs_sample-mpijob.yaml",
        Gangs(&[(
            "pi",
            &[
                ("launcher", 1, None, 1, 1024, 0),
                ("worker", 2, None, 1, 1024, 0),
            ],
        )]),
    ),
    (
        "kueue__site_static_examples_jobs_sample-pytorchjob.yaml",
        Gangs(&[(
            "pytorch-simple",
            &[
                ("master", 1, None, 1, 200, 0),
                ("worker", 1, None, 1, 200, 0),
            ],
        )]),
    ),
    (
        "kueue__site_static_examples_tas_sample-gpu-queues.yaml",
        Queues(
            &["tas-cluster-queue"],
            &[("default", "tas-user-queue", "tas-cluster-queue")],
        ),
    ),
    (
        "mpiop__examples_v2beta1_horovod_tensorflow-mnist.yaml",
        Gangs(&[(
            "tensorflow-mnist",
            &[
                ("launcher", 1, None, 1, 2048, 0),
                ("worker", 2, None, 2, 4096, 0),
            ],
        )]),
    ),
    (
        "mpiop__examples_v2beta1_pi_pi.yaml",
        Gangs(&[(
            "pi",
            &[
                ("launcher", 1, None, 1, 1024, 0),
                ("worker", 2, None, 1, 1024, 0),
            ],
        )]),
    ),
    (
        "mpiop__examples_v2beta1_tensorflow-benchmarks_tensorflow-benchmarks.yaml",
        Gangs(&[(
            "tensorflow-benchmarks",
            &[("launcher", 1, None, 1, 0, 0), ("worker", 2, None, 1, 0, 1)],
        )]),
    ),
    (
        "trainop__examples_mpi_tensorflow-mnist.yaml",
        Unsupported(1, "MPIJob", "kubeflow.org/v1", "`kubectl exec`"),
    ),
    (
        "trainop__examples_pytorch_deepspeed-demo_pytorch_deepspeed_demo.yaml",
        Gangs(&[(
            "pytorch-deepspeed-demo",
            &[("master", 1, None, 1, 0, 1), ("worker", 1, None, 1, 0, 1)],
        )]),
    ),
    (
        "trainop__examples_pytorch_elastic_imagenet_imagenet.yaml",
        Gangs(&[(
            "elastic-example-imagenet",
            &[("worker", 2, Some(1), 4, 0, 0)],
        )]),
    ),
    (
        "trainop__examples_pytorch_mnist_v1_pytorch_job_mnist_nccl.yaml",
        Refused(
            1,
            &[
                (
                    "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command",
                    "image's entrypoint",
                ),
                (
                    "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command",
                    "image's entrypoint",
                ),
            ],
        ),
    ),
    (
        "trainop__examples_pytorch_simple.yaml",
        Gangs(&[(
            "pytorch-simple",
            &[("master", 1, None, 1, 0, 0), ("worker", 1, None, 1, 0, 0)],
        )]),
    ),
    (
        "trainop__manifests_base_runtimes_pretraining_mpi_distributed.yaml",
        Refused(1, &[("kind", "does not run TrainJobs yet")]),
    ),
    (
        "trainop__manifests_base_runtimes_pretraining_torch_distributed.yaml",
        Refused(1, &[("kind", "does not run TrainJobs yet")]),
    ),
    (
        "volcano__example_MindSpore-example_mindspore_gpu_mindspore-gpu.yaml",
        Gangs(&[(
            "mindspore-gpu",
            &[
                ("mpimaster", 1, None, 1, 0, 0),
                ("mpiworker", 2, None, 1, 0, 1),
            ],
        )]),
    ),
    (
        "volcano__example_hierarchical-jobs_queues.yaml",
        Refused(
            1,
            &[
                (
                    "metadata.annotations[volcano.sh/hierarchy]",
                    "hierarchical queues",
                ),
                (
                    "metadata.annotations[volcano.sh/hierarchy-weights]",
                    "hierarchical queues",
                ),
            ],
        ),
    ),
    (
        "volcano__example_integrations_mpi_mpi-example.yaml",
        Gangs(&[(
            "lm-mpi-job",
            &[
                ("mpimaster", 1, None, 1, 0, 0),
                ("mpiworker", 2, None, 1, 0, 0),
            ],
        )]),
    ),
    (
        "volcano__example_job.yaml",
        Refused(
            1,
            &[(
                "spec.tasks[0].template.spec.containers[0].command",
                "image's entrypoint (image `nginx`)",
            )],
        ),
    ),
];

/// With a container runtime configured, these run their images' entrypoints.
const WITH_RUNTIME: &[(&str, &str, &[G])] = &[
    (
        "trainop__examples_pytorch_mnist_v1_pytorch_job_mnist_nccl.yaml",
        "pytorch-dist-mnist-nccl",
        &[("master", 1, None, 1, 0, 1), ("worker", 1, None, 1, 0, 1)],
    ),
    (
        "volcano__example_job.yaml",
        "test-job",
        &[("default-nginx", 6, Some(3), 1, 0, 0)],
    ),
];

fn corpus_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/k8s");
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the manifest corpus {} is missing, and CI must run this test",
        dir.display()
    );
    eprintln!("skipped: no manifest corpus at {}", dir.display());
    None
}

fn opts() -> TranslateOptions {
    TranslateOptions::new("alice", "research", "/home/alice/runs")
}

/// A group as compared: owned.
type Og = (String, u32, Option<u32>, u32, u64, u32);

fn check_gangs(file: &str, plan: &cadre_k8s::Plan, want: &[(&str, &[G])]) {
    let got: Vec<(String, Vec<Og>)> = plan
        .workloads
        .iter()
        .map(|w| {
            let groups = w
                .spec
                .groups
                .iter()
                .map(|g| {
                    let r = &g.per_task;
                    (
                        g.name.clone(),
                        g.count,
                        g.min_count,
                        r.cpus,
                        r.mem_mib,
                        r.gpus,
                    )
                })
                .collect();
            (w.name.clone(), groups)
        })
        .collect();
    let want: Vec<(String, Vec<Og>)> = want
        .iter()
        .map(|(n, gs)| {
            let groups = gs
                .iter()
                .map(|&(g, c, m, cpu, mem, gpu)| (g.to_string(), c, m, cpu, mem, gpu))
                .collect();
            (n.to_string(), groups)
        })
        .collect();
    assert_eq!(got, want, "{file}: the gang differs");
}

fn check_refused(file: &str, err: &K8sError, doc: usize, want: &[(&str, &str)]) {
    let K8sError::InDocument { doc: got_doc, .. } = err else {
        panic!("{file}: expected a refusal of document {doc}, got: {err}");
    };
    assert_eq!(*got_doc, doc, "{file}: refused document, in {err}");
    let problems = err.problems();
    assert_eq!(problems.len(), want.len(), "{file}: problems of {err}");
    for (p, (path, words)) in problems.iter().zip(want) {
        assert_eq!(p.path, *path, "{file}: {err}");
        assert!(
            p.reason.contains(words),
            "{file}: `{}` lacks `{words}`",
            p.reason
        );
    }
}

#[test]
fn every_corpus_manifest_has_its_expected_outcome() {
    let Some(dir) = corpus_dir() else { return };
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    files.sort();
    let listed: Vec<&str> = CORPUS.iter().map(|(f, _)| *f).collect();
    assert_eq!(files, listed, "the corpus and this test's list differ");
    for (file, expect) in CORPUS {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let result = plan(&text, file, &opts());
        match (expect, result) {
            (Gangs(want), Ok(p)) => {
                check_gangs(file, &p, want);
                assert!(p.queues.queues.is_empty(), "{file}");
            }
            (Queues(names, routes), Ok(p)) => {
                assert!(p.workloads.is_empty(), "{file}");
                let got: Vec<&str> = p
                    .queues
                    .queues
                    .iter()
                    .map(|q| q.config.name.as_str())
                    .collect();
                assert_eq!(got, *names, "{file}");
                let got: Vec<(&str, &str, &str)> = p
                    .queues
                    .local_queues
                    .iter()
                    .map(|l| {
                        (
                            l.namespace.as_str(),
                            l.name.as_str(),
                            l.cluster_queue.as_str(),
                        )
                    })
                    .collect();
                assert_eq!(got, *routes, "{file}");
            }
            (Refused(doc, want), Err(e)) => check_refused(file, &e, *doc, want),
            (Unsupported(doc, kind, api, hint), Err(e)) => match &e {
                K8sError::UnsupportedKind {
                    doc: d,
                    kind: k,
                    api_version: a,
                    hint: Some(h),
                    ..
                } => {
                    assert_eq!(
                        (d, k.as_str(), a.as_str()),
                        (doc, *kind, *api),
                        "{file}: {e}"
                    );
                    assert!(h.contains(hint), "{file}: {e}");
                }
                _ => panic!("{file}: expected an unsupported kind, got: {e}"),
            },
            (_, Ok(_)) => panic!("{file}: accepted, but a refusal was expected"),
            (_, Err(e)) => panic!("{file}: refused, but it was expected to be accepted: {e}"),
        }
    }
}

#[test]
fn with_a_container_runtime_entrypoint_images_are_accepted() {
    let Some(dir) = corpus_dir() else { return };
    let mut o = opts();
    o.container_runtime = true;
    for (file, name, groups) in WITH_RUNTIME {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let p = plan(&text, file, &o).unwrap_or_else(|e| panic!("{file}: {e}"));
        check_gangs(file, &p, &[(*name, *groups)]);
        assert!(matches!(
            p.workloads[0].groups[0].program,
            cadre_k8s::Program::Image { command: None, .. }
        ));
        assert!(p.workloads[0].containers);
        assert_eq!(
            p.workloads[0].spec.features,
            [cadre_k8s::CONTAINER_RUNTIME_FEATURE]
        );
    }
}

#[test]
fn corpus_topology_and_completion_details() {
    let Some(dir) = corpus_dir() else { return };
    let read = |f: &str| {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        plan(&text, f, &opts()).unwrap().workloads.remove(0)
    };
    let tas = read("kueue__site_static_examples_jobs_sample-jobset-tas-required.yaml");
    assert_eq!(
        tas.spec.topology.span,
        cadre_core::job::NetworkSpan::OneLeaf
    );
    let mpi = read("volcano__example_integrations_mpi_mpi-example.yaml");
    assert_eq!(mpi.completion, cadre_k8s::Completion::Groups(vec![0]));
    let pi = read("mpiop__examples_v2beta1_pi_pi.yaml");
    assert_eq!(pi.ssh.as_ref().unwrap().mount_path, "/home/mpiuser/.ssh");
    assert_eq!(pi.spec.annotations["k8s.worker.runAsUser"], "1000");
    let bench = read("mpiop__examples_v2beta1_tensorflow-benchmarks_tensorflow-benchmarks.yaml");
    assert_eq!(
        bench.groups[1].program,
        cadre_k8s::Program::Argv(vec!["/usr/sbin/sshd".into(), "-De".into()])
    );
}

#[test]
fn corpus_queues_have_the_quotas_they_state() {
    let Some(dir) = corpus_dir() else { return };
    let text =
        std::fs::read_to_string(dir.join("kueue__site_static_examples_tas_sample-gpu-queues.yaml"))
            .unwrap();
    let p = plan(&text, "q", &opts()).unwrap();
    let q = &p.queues.queues[0].config;
    assert_eq!(q.nominal.cpus, Some(100));
    assert_eq!(q.nominal.mem_mib, Some(100 * 1024));
    assert_eq!(q.nominal.gpu_milli, Some(16_000));
    assert_eq!(q.nominal.nics, None);
    assert_eq!(
        p.queues.node_selector("tas-cluster-queue"),
        [(
            "cloud.provider.com/node-group".to_string(),
            "tas-group".to_string()
        )]
    );
    assert_eq!(
        p.queues.topologies["default"],
        [
            "cloud.provider.com/topology-block",
            "cloud.provider.com/topology-rack",
            "kubernetes.io/hostname"
        ]
    );
    p.queues.quota_config().unwrap();
}

/// The full text of every outcome, as a user reads it: gangs with their groups, queues, and
/// refusals with every reason.
#[test]
fn corpus_outcomes_read_as_a_user_sees_them() {
    let Some(dir) = corpus_dir() else { return };
    let mut out = String::new();
    for (file, _) in CORPUS {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        match plan(&text, file, &opts()) {
            Err(e) => out.push_str(&format!("{e}\n\n")),
            Ok(p) => {
                for w in &p.workloads {
                    let groups: Vec<String> = w
                        .spec
                        .groups
                        .iter()
                        .map(|g| {
                            format!(
                                "{} x{}{}: {:?}",
                                g.name,
                                g.count,
                                g.min_count
                                    .map(|m| format!(" (min {m})"))
                                    .unwrap_or_default(),
                                g.per_task
                            )
                        })
                        .collect();
                    out.push_str(&format!(
                        "{file}: {} in {}: {}; completion {:?}; topology {:?}\n",
                        w.name,
                        w.namespace,
                        groups.join("; "),
                        w.completion,
                        w.spec.topology
                    ));
                }
                for q in &p.queues.queues {
                    out.push_str(&format!("{file}: queue {:?}\n", q.config));
                }
                out.push('\n');
            }
        }
    }
    insta::assert_snapshot!(out);
}

/// The workloads of the corpus labelled for a Kueue LocalQueue: file, LocalQueue.
const KUEUE_ROUTED: &[(&str, &str)] = &[
    (
        "kueue__site_static_examples_jobs_sample-jobset-tas-required.yaml",
        "user-queue",
    ),
    (
        "kueue__site_static_examples_jobs_sample-mpijob.yaml",
        "user-queue",
    ),
    (
        "kueue__site_static_examples_jobs_sample-pytorchjob.yaml",
        "user-queue",
    ),
];

#[test]
fn corpus_queue_objects_apply_together_and_route_the_kueue_workloads() {
    let Some(dir) = corpus_dir() else { return };
    let mut set = cadre_k8s::QueueSet::default();
    for (file, expect) in CORPUS {
        if let Queues(..) = expect {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for o in cadre_k8s::parse_documents(&text, file).unwrap() {
                set.apply(&o).unwrap_or_else(|e| panic!("{file}: {e}"));
            }
        }
    }
    set.check_references()
        .expect("every flavor and topology named is applied");
    let config = set.quota_config().expect("a valid quota configuration");
    assert_eq!(config.queues.len(), 1);
    let mut routed = Vec::new();
    for (file, expect) in CORPUS {
        let Gangs(_) = expect else { continue };
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for w in plan(&text, file, &opts()).unwrap().workloads {
            if let Some(q @ cadre_k8s::QueueRef::Kueue { local_queue, .. }) = &w.queue {
                let err = set
                    .route(q)
                    .expect_err("no LocalQueue of that name is applied");
                assert_eq!(
                    err.to_string(),
                    format!("LocalQueue `{local_queue}` does not exist in namespace `default`"),
                    "{file}"
                );
                routed.push((*file, local_queue.clone()));
            }
        }
    }
    let want: Vec<(&str, String)> = KUEUE_ROUTED
        .iter()
        .map(|(f, q)| (*f, q.to_string()))
        .collect();
    assert_eq!(routed, want, "the Kueue-labelled workloads of the corpus");
    // With Kueue's `user-queue` applied (here feeding the corpus's ClusterQueue), each is
    // routed to it, on the flavor's nodes.
    let lq = "apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: default, name: user-queue}
spec: {clusterQueue: tas-cluster-queue}
";
    for o in cadre_k8s::parse_documents(lq, "user-queue.yaml").unwrap() {
        set.apply(&o).unwrap();
    }
    let q = cadre_k8s::QueueRef::Kueue {
        namespace: "default".into(),
        local_queue: "user-queue".into(),
    };
    assert_eq!(set.route(&q).unwrap(), "tas-cluster-queue");
    assert_eq!(
        set.node_selector("tas-cluster-queue"),
        [(
            "cloud.provider.com/node-group".to_string(),
            "tas-group".to_string()
        )]
    );
}

/// Regression (issue 14): a manifest of 100,000 nested `[` kept `cadre apply` parsing for
/// minutes (the YAML parser's work grows with the square of the depth). Texts nested
/// deeper than the bound are refused before any parsing, flow or block style, naming the
/// file, the document, the line and the bound; the real manifests nest far less.
#[test]
fn deeply_nested_yaml_is_refused_before_parsing_and_real_manifests_are_far_below_the_bound() {
    let too_deep = |text: &str, doc: usize, line: usize| {
        let err = cadre_k8s::parse_documents(text, "deep.yaml").expect_err("refused");
        assert!(
            matches!(
                err,
                K8sError::TooDeep { doc: d, line: l, limit, .. }
                    if d == doc && l == line && limit == cadre_k8s::MAX_NESTING_DEPTH
            ),
            "{err:?}"
        );
        err.to_string()
    };
    let flow = "[".repeat(100_000);
    assert_eq!(
        too_deep(&flow, 1, 1),
        "deep.yaml, document 1: collections nested deeper than 64 levels at line 1; cadre \
         reads manifests nested at most 64 levels deep"
    );
    let flow_lines = format!("a: 1\n---\nkind: Job\nspec: {}\n", "[\n".repeat(100_000));
    too_deep(&flow_lines, 2, 67);
    let block_mapping: String = (0..1000)
        .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
        .collect();
    too_deep(&block_mapping, 1, 65);
    let block_sequence = format!("items:\n{}x\n", "- ".repeat(100_000));
    too_deep(&block_sequence, 1, 2);
    // At the bound, a text is parsed as before.
    let at_bound = format!("{}1{}", "[".repeat(64), "]".repeat(64));
    let parsed = cadre_k8s::parse_documents(&at_bound, "ok.yaml");
    assert!(
        matches!(parsed, Err(K8sError::NotAnObject { .. })),
        "{parsed:?}"
    );
    let Some(dir) = corpus_dir() else {
        return;
    };
    let mut deepest = (0, String::new());
    for (file, _) in CORPUS {
        let text = std::fs::read_to_string(dir.join(file)).expect("corpus file");
        let depth = cadre_k8s::nesting::nesting_depth(&text);
        if depth > deepest.0 {
            deepest = (depth, file.to_string());
        }
        if let Err(e) = cadre_k8s::parse_documents(&text, file) {
            assert!(!matches!(e, K8sError::TooDeep { .. }), "{file}: {e}");
        }
    }
    assert!(
        deepest.0 <= cadre_k8s::MAX_NESTING_DEPTH / 2,
        "the corpus's deepest manifest, {} ({} levels), is near the bound",
        deepest.1,
        deepest.0
    );
    eprintln!(
        "deepest manifest of the corpus: {} ({} levels)",
        deepest.1, deepest.0
    );
}
