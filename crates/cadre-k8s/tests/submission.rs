//! What a translated workload is submitted as, and the translation read back from its run
//! spec as the agent reads it.

use cadre_core::run::Export;
use cadre_k8s::{
    TranslateOptions, WORKLOAD_RUN_VERSION, parse_documents, submission, translate, workload_of,
};

const MPI: &str = "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi, namespace: team}
spec:
  slotsPerWorker: 2
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers:
          - name: l
            image: m
            command: [mpirun, -n, '4', /pi]
            env: [{name: A, value: '1'}, {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: w, image: m, workingDir: /scratch}]
";

const INDEXED: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: idx}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      subdomain: idx
      restartPolicy: Never
      containers: [{name: c, image: python, command: [python3, -c, 'print(1)']}]
";

fn translated(yaml: &str) -> cadre_k8s::Translated {
    let o = TranslateOptions::new("alice", "research", "/home/alice");
    translate(&parse_documents(yaml, "t").unwrap()[0], &o).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn an_mpijob_completes_with_its_launcher_and_carries_its_translation() {
    let t = translated(MPI);
    let (spec, run) = submission(&t).unwrap();
    assert_eq!(spec.annotations["k8s.kind"], "MPIJob");
    assert_eq!(spec.annotations["k8s.namespace"], "team");
    assert_eq!(spec.annotations["k8s.name"], "pi");
    assert_eq!(spec.groups.len(), 2);
    // The launcher's program, for display; each group's is computed per rank by the agent.
    assert_eq!(run.command, ["mpirun", "-n", "4", "/pi"]);
    assert_eq!(run.work_dir, std::path::Path::new("/home/alice"));
    assert_eq!(run.export, Export::None);
    assert_eq!(run.stdout.as_deref(), Some("pi-%j-%t.out"));
    assert_eq!(run.completing_groups, Some(vec![0]));
    let carried = run.kubernetes.as_ref().unwrap();
    assert_eq!(carried["version"], WORKLOAD_RUN_VERSION);
    // Through JSON text, as the store and the wire carry it.
    let run: cadre_core::run::RunSpec =
        serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
    assert_eq!(workload_of(&run).unwrap(), Some(t));
}

#[test]
fn a_job_completes_with_every_task_and_plain_jobs_carry_nothing() {
    let t = translated(INDEXED);
    let (spec, run) = submission(&t).unwrap();
    assert_eq!(spec.annotations["k8s.kind"], "Job");
    assert_eq!(spec.annotations["k8s.name"], "idx");
    assert_eq!(spec.annotations["k8s.namespace"], "default");
    assert_eq!(run.completing_groups, None);
    let plain = cadre_core::run::RunSpec::command(vec!["true".into()], "/".into());
    assert_eq!(workload_of(&plain).unwrap(), None);
}

#[test]
fn an_unknown_version_is_refused_with_both_versions() {
    let (_, mut run) = submission(&translated(INDEXED)).unwrap();
    run.kubernetes.as_mut().unwrap()["version"] = serde_json::json!(99);
    let err = workload_of(&run).unwrap_err().to_string();
    assert_eq!(
        err,
        "the job's Kubernetes translation cannot be read: it is version 99; this cadre reads versions 1 and 2"
    );
    // A version-1 translation (before containers) reads as one that runs on the host.
    let (_, mut run) = submission(&translated(INDEXED)).unwrap();
    let carried = run.kubernetes.as_mut().unwrap();
    carried["version"] = serde_json::json!(1);
    let workload = carried["workload"].as_object_mut().unwrap();
    workload.remove("containers");
    for g in workload["groups"].as_array_mut().unwrap() {
        g.as_object_mut().unwrap().remove("pull_policy");
    }
    let t = workload_of(&run).unwrap().unwrap();
    assert!(!t.containers);
    assert_eq!(t, translated(INDEXED));
    run.kubernetes = Some(serde_json::json!({"version": 1, "workload": {"name": 3}}));
    let err = workload_of(&run).unwrap_err().to_string();
    assert!(
        err.starts_with("the job's Kubernetes translation cannot be read: "),
        "{err}"
    );
}
