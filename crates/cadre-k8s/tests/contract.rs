//! The per-rank contracts, against shared/research/k8s_batch.md section 6 (the MPI
//! Operator's hostfile and variables, the Training Operator's PyTorchJob variables,
//! Volcano's env and svc plugins, Indexed Jobs' JOB_COMPLETION_INDEX) and the naming the
//! workloads use to find each other.

use cadre_k8s::contract::{completing_groups, expand};
use cadre_k8s::{
    K8sError, PlacedTask, Placement, Program, TranslateOptions, Translated, discover_hosts,
    dns_names, hostfile, hosts_file, job_files, parse_documents, pod_name, rank_environment,
    rank_program, translate,
};
use std::collections::BTreeMap;

fn job(yaml: &str) -> Translated {
    let o = TranslateOptions::new("alice", "research", "/home/alice");
    translate(&parse_documents(yaml, "t").unwrap()[0], &o).unwrap_or_else(|e| panic!("{e}"))
}

/// Every task on its own node `nodeN` at `10.0.0.N`, numbered from 1 in rank order.
fn spread(t: &Translated) -> Placement {
    let mut n = 0;
    Placement::new(
        t.spec
            .groups
            .iter()
            .map(|g| {
                (0..g.count)
                    .map(|_| {
                        n += 1;
                        PlacedTask {
                            node: format!("node{n}"),
                            address: format!("10.0.0.{n}"),
                        }
                    })
                    .collect()
            })
            .collect(),
    )
}

/// The environment of a rank as the task sees it (later entries win).
fn env(t: &Translated, rank: u32, p: &Placement) -> BTreeMap<String, String> {
    rank_environment(t, rank, p).unwrap().into_iter().collect()
}

const MPI: &str = "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi}
spec:
  slotsPerWorker: 2
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers: [{name: l, image: m, command: [mpirun, -n, '4', /pi]}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: w, image: m}]
";

#[test]
fn mpi_operator_hostfile_and_launcher_variables() {
    let t = job(MPI);
    let p = spread(&t);
    assert_eq!(
        hostfile(&t, &p).unwrap().unwrap(),
        "pi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n"
    );
    let launcher = env(&t, 0, &p);
    let want = [
        ("K_MPI_JOB_ROLE", "launcher"),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", "2"),
        ("NVIDIA_VISIBLE_DEVICES", ""),
        ("NVIDIA_DRIVER_CAPABILITIES", ""),
    ];
    for (k, v) in want {
        assert_eq!(launcher.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert_eq!(env(&t, 1, &p)["K_MPI_JOB_ROLE"], "worker");
    assert!(!env(&t, 2, &p).contains_key("OMPI_MCA_orte_default_hostfile"));
    // Workers without a command run the operator's sshd.
    assert_eq!(
        rank_program(&t, 2, &p).unwrap(),
        Program::Argv(vec!["/usr/sbin/sshd".into(), "-De".into()])
    );
    // The launcher's names and the workers' resolve to their nodes.
    let hosts = hosts_file(&t, &p).unwrap();
    // The fully qualified name first, as in a pod's own hosts file (`hostname -f`).
    assert!(hosts.contains("10.0.0.1\tpi-launcher.pi.default.svc.cluster.local pi-launcher pi-launcher.pi pi-launcher.pi.default pi-launcher.pi.default.svc\n"), "{hosts}");
    assert!(
        hosts.contains(
            "10.0.0.3\tpi-worker-1.pi.default.svc.cluster.local pi-worker-1 pi-worker-1.pi "
        ),
        "{hosts}"
    );
    assert_eq!(completing_groups(&t), [0]);
    let files = job_files(&t, &p).unwrap();
    assert_eq!(files[0].path, "/etc/mpi/hostfile");
    assert_eq!((files[0].mode, files[0].groups.clone()), (0o444, vec![0]));
    assert_eq!(files[1].path, "/etc/mpi/discover_hosts.sh");
    assert_eq!(
        files[1].text,
        "#!/bin/sh\necho pi-worker-0.pi.default.svc\necho pi-worker-1.pi.default.svc\n"
    );
}

#[test]
fn with_cadre_s_rsh_agent_every_mpi_launches_through_it_and_sshd_workers_hold() {
    let t = job(MPI);
    let mut p = spread(&t);
    // Without the agent, nothing names it.
    assert!(!env(&t, 0, &p).contains_key("OMPI_MCA_plm_rsh_agent"));
    p.rsh_agent = Some("/etc/mpi/cadre-rsh".into());
    let e = env(&t, 0, &p);
    for (k, v) in [
        ("OMPI_MCA_plm", "rsh"),
        ("OMPI_MCA_ras", "^slurm"),
        ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/cadre-rsh"),
        ("OMPI_MCA_plm_rsh_no_tree_spawn", "1"),
    ] {
        assert_eq!(e.get(k).map(String::as_str), Some(v), "{k}");
    }
    // Workers are not launchers: they see none of it.
    assert!(!env(&t, 1, &p).contains_key("OMPI_MCA_plm_rsh_agent"));
    for (implementation, exec, launcher) in [
        (
            "Intel",
            "I_MPI_HYDRA_BOOTSTRAP_EXEC",
            "I_MPI_HYDRA_BOOTSTRAP",
        ),
        ("MPICH", "HYDRA_LAUNCHER_EXEC", "HYDRA_LAUNCHER"),
    ] {
        let t = job(&MPI.replace(
            "  slotsPerWorker: 2\n",
            &format!("  mpiImplementation: {implementation}\n"),
        ));
        let e = env(&t, 0, &p);
        assert_eq!(e[exec], "/etc/mpi/cadre-rsh", "{implementation}");
        assert_eq!(e[launcher], "ssh", "{implementation}");
        assert!(!e.contains_key("OMPI_MCA_plm_rsh_agent"));
    }
    // The operator's default worker (sshd) holds; the launcher never does.
    assert!(cadre_k8s::holds_for_rsh(&t, 1));
    assert!(!cadre_k8s::holds_for_rsh(&t, 0));
    // A worker with a program of its own runs it; so does a worker whose sshd is the
    // manifest's own, which holds too.
    let own = job(&MPI.replace(
        "containers: [{name: w, image: m}]",
        "containers: [{name: w, image: m, command: [sleep, '60']}]",
    ));
    assert!(!cadre_k8s::holds_for_rsh(&own, 1));
    let sshd = job(&MPI.replace(
        "containers: [{name: w, image: m}]",
        "containers: [{name: w, image: m, command: [/usr/sbin/sshd], args: [-De, -f, /home/mpiuser/.sshd_config]}]",
    ));
    assert!(cadre_k8s::holds_for_rsh(&sshd, 1));
}

#[test]
fn intel_and_mpich_hostfiles_and_the_launcher_as_worker() {
    let intel = MPI.replace(
        "  slotsPerWorker: 2\n",
        "  slotsPerWorker: 2\n  mpiImplementation: Intel\n  runLauncherAsWorker: true\n",
    );
    let t = job(&intel);
    let p = spread(&t);
    assert_eq!(
        hostfile(&t, &p).unwrap().unwrap(),
        "pi-launcher.pi.default.svc:2\npi-worker-0.pi.default.svc:2\npi-worker-1.pi.default.svc:2\n"
    );
    let e = env(&t, 0, &p);
    assert_eq!(e["I_MPI_HYDRA_HOST_FILE"], "/etc/mpi/hostfile");
    assert_eq!(
        e["I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"],
        "-o ConnectionAttempts=10"
    );
    assert_eq!(e["I_MPI_PERHOST"], "2");
    assert!(!e.contains_key("NVIDIA_VISIBLE_DEVICES"));
    let t = job(&MPI.replace("  slotsPerWorker: 2\n", "  mpiImplementation: MPICH\n"));
    let mut p = spread(&t);
    p.mpi_dir = "/var/lib/cadre/jobs/7/mpi".into();
    let e = env(&t, 0, &p);
    assert_eq!(e["HYDRA_HOST_FILE"], "/var/lib/cadre/jobs/7/mpi/hostfile");
    assert_eq!(e["HYDRA_LAUNCH_EXTRA_ARGS"], "-o ConnectionAttempts=10");
    assert_eq!(
        hostfile(&t, &p).unwrap().unwrap().lines().next(),
        Some("pi-worker-0.pi.default.svc:1")
    );
}

#[test]
fn discover_hosts_sorts_running_workers_by_name() {
    let t = job(&MPI.replace("replicas: 2", "replicas: 12"));
    assert_eq!(
        discover_hosts(&t, &[2, 10]).unwrap(),
        "#!/bin/sh\necho pi-worker-10.pi.default.svc\necho pi-worker-2.pi.default.svc\n"
    );
}

const TORCH: &str = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp, namespace: ml}
spec:
  nprocPerNode: \"8\"
  pytorchReplicaSpecs:
    Master:
      template:
        spec:
          containers:
          - {name: pytorch, image: t, command: [torchrun, --nnodes=$(PET_NNODES), train.py], env: [{name: LOG, value: debug}]}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - {name: pytorch, image: t, command: [torchrun, train.py]}
";

#[test]
fn pytorchjob_master_variables() {
    let t = job(TORCH);
    let p = spread(&t);
    let master = env(&t, 0, &p);
    let want = [
        ("PYTHONUNBUFFERED", "0"),
        ("MASTER_ADDR", "ddp-master-0"),
        ("PET_MASTER_ADDR", "ddp-master-0"),
        ("MASTER_PORT", "23456"),
        ("PET_MASTER_PORT", "23456"),
        ("WORLD_SIZE", "24"),
        ("RANK", "0"),
        ("PET_NODE_RANK", "0"),
        ("PET_NPROC_PER_NODE", "8"),
        ("PET_NNODES", "3"),
        ("LOG", "debug"),
    ];
    for (k, v) in want {
        assert_eq!(master.get(k).map(String::as_str), Some(v), "{k}");
    }
    let w1 = env(&t, 2, &p);
    assert_eq!(
        (w1["RANK"].as_str(), w1["PET_NODE_RANK"].as_str()),
        ("2", "2")
    );
    // The user's env comes first, the operator's after it, as Kubernetes appends them.
    let list = rank_environment(&t, 0, &p).unwrap();
    assert_eq!(list[0], ("LOG".to_string(), "debug".to_string()));
    // $(VAR) in the command is expanded with the whole environment.
    assert_eq!(
        rank_program(&t, 0, &p).unwrap(),
        Program::Argv(vec![
            "torchrun".into(),
            "--nnodes=3".into(),
            "train.py".into()
        ])
    );
    // The master's Service names resolve to its node.
    assert_eq!(
        dns_names(&t, 0, 0),
        [
            "ddp-master-0",
            "ddp-master-0.ml",
            "ddp-master-0.ml.svc",
            "ddp-master-0.ml.svc.cluster.local"
        ]
    );
    // A port the controller moved (tasks of several jobs on one node share its ports).
    let mut moved = p.clone();
    moved.rendezvous_port = Some(40001);
    assert_eq!(env(&t, 1, &moved)["MASTER_PORT"], "40001");
    // nprocPerNode left to its default: auto, and WORLD_SIZE counts one per node.
    let t = job(&TORCH.replace("  nprocPerNode: \"8\"\n", ""));
    let e = env(&t, 0, &spread(&t));
    assert_eq!(
        (e["PET_NPROC_PER_NODE"].as_str(), e["WORLD_SIZE"].as_str()),
        ("auto", "3")
    );
}

#[test]
fn pytorchjob_elastic_variables() {
    let y = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: elastic-example-imagenet}
spec:
  elasticPolicy: {rdzvBackend: c10d, minReplicas: 1, maxReplicas: 3, maxRestarts: 100, rdzvConf: [{key: a, value: '1'}, {key: b, value: '2'}]}
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: pytorch, image: i, command: [python, -m, torch.distributed.run, x.py]}]
";
    let t = job(y);
    // Elastic: one worker may be all that is placed.
    let mut p = spread(&t);
    p.tasks[0].truncate(1);
    let e = env(&t, 0, &p);
    let want = [
        (
            "PET_RDZV_ENDPOINT",
            "elastic-example-imagenet-worker-0:23456",
        ),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_NNODES", "1:3"),
        ("PET_MAX_RESTARTS", "100"),
        ("PET_RDZV_CONF", "a=1,b=2"),
        ("PYTHONUNBUFFERED", "0"),
    ];
    for (k, v) in want {
        assert_eq!(e.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert!(!e.contains_key("MASTER_ADDR") && !e.contains_key("WORLD_SIZE"));
    assert!(matches!(
        rank_environment(&t, 1, &p),
        Err(K8sError::Contract { .. })
    ));
    let mut none = p.clone();
    none.tasks[0].clear();
    let err = rank_environment(&t, 0, &none).unwrap_err().to_string();
    assert!(
        err.contains("asks for 1 to 2 tasks; the placement gives 0"),
        "{err}"
    );
}

#[test]
fn indexed_job_completion_index_names_and_field_refs() {
    let y = "apiVersion: batch/v1
kind: Job
metadata: {name: ranks, namespace: team}
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 3
  template:
    spec:
      subdomain: ranks-svc
      containers:
      - name: c
        image: i
        command: [sh, -c, 'echo $(ME) $$(ME)']
        env:
        - name: POD
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: NODE
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        - name: IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: ME
          value: $(POD)@$(NODE)/$(LATER)
        - {name: LATER, value: x}
";
    let t = job(y);
    let p = spread(&t);
    let e = env(&t, 2, &p);
    assert_eq!(e["JOB_COMPLETION_INDEX"], "2");
    assert_eq!(e["POD"], "ranks-2");
    assert_eq!(e["NODE"], "node3");
    assert_eq!(e["IP"], "10.0.0.3");
    // Only earlier variables expand in a value; the program sees them all.
    assert_eq!(e["ME"], "ranks-2@node3/$(LATER)");
    assert_eq!(
        rank_program(&t, 2, &p).unwrap(),
        Program::Argv(vec![
            "sh".into(),
            "-c".into(),
            "echo ranks-2@node3/$(LATER) $(ME)".into()
        ])
    );
    assert_eq!(pod_name(&t, 0, 1), "ranks-1");
    assert!(
        hosts_file(&t, &p)
            .unwrap()
            .contains("10.0.0.1\tranks-0.ranks-svc.team.svc.cluster.local ranks-0 ranks-0.ranks-svc ranks-0.ranks-svc.team ")
    );
    assert_eq!(
        dns_names(&t, 0, 0)[4],
        "ranks-0.ranks-svc.team.svc.cluster.local"
    );
    // Without a subdomain the pods have no names to resolve.
    let t = job(&y.replace("      subdomain: ranks-svc\n", ""));
    assert!(dns_names(&t, 0, 0).is_empty());
}

#[test]
fn volcano_env_and_svc_plugins() {
    let y = "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: lm-mpi-job}
spec:
  minAvailable: 3
  plugins: {env: [], svc: [], ssh: []}
  tasks:
  - replicas: 1
    name: mpimaster
    template:
      spec:
        containers: [{name: m, image: i, command: [mpiexec]}]
  - replicas: 2
    name: mpi-worker
    template:
      spec:
        containers: [{name: w, image: i, command: [sshd]}]
";
    let t = job(y);
    let p = spread(&t);
    let e = env(&t, 2, &p);
    assert_eq!(
        (e["VK_TASK_INDEX"].as_str(), e["VC_TASK_INDEX"].as_str()),
        ("1", "1")
    );
    assert_eq!(
        e["VC_MPI_WORKER_HOSTS"],
        "lm-mpi-job-mpi-worker-0.lm-mpi-job,lm-mpi-job-mpi-worker-1.lm-mpi-job"
    );
    assert_eq!(e["VC_MPI_WORKER_NUM"], "2");
    assert_eq!(e["VC_MPIMASTER_HOSTS"], "lm-mpi-job-mpimaster-0.lm-mpi-job");
    let files = job_files(&t, &p).unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/etc/volcano/mpimaster.host",
            "/etc/volcano/mpi_worker.host"
        ]
    );
    assert_eq!(
        files[1].text,
        "lm-mpi-job-mpi-worker-0.lm-mpi-job\nlm-mpi-job-mpi-worker-1.lm-mpi-job"
    );
    assert_eq!(files[1].groups, [0, 1]);
    assert!(
        hosts_file(&t, &p)
            .unwrap()
            .contains("10.0.0.2\tlm-mpi-job-mpi-worker-0.lm-mpi-job.default.svc.cluster.local lm-mpi-job-mpi-worker-0 lm-mpi-job-mpi-worker-0.lm-mpi-job ")
    );
    // Without the svc plugin there are no names and no host files.
    let t = job(&y.replace("{env: [], svc: [], ssh: []}", "{env: []}"));
    let p = spread(&t);
    assert!(job_files(&t, &p).unwrap().is_empty());
    assert!(!env(&t, 0, &p).contains_key("VC_MPIMASTER_HOSTS"));
}

#[test]
fn jobset_names_and_indices() {
    let y = "apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js}
spec:
  network: {subdomain: net}
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            containers: [{name: w, image: x, command: [work]}]
";
    let t = job(y);
    let p = spread(&t);
    assert_eq!(pod_name(&t, 0, 3), "js-workers-1-1");
    assert_eq!(env(&t, 2, &p)["JOB_COMPLETION_INDEX"], "0");
    assert_eq!(dns_names(&t, 0, 2)[1], "js-workers-1-0.net");
}

#[test]
fn expansion_follows_kubernetes() {
    let look = |n: &str| match n {
        "A" => Some("1".to_string()),
        _ => None,
    };
    assert_eq!(expand("$(A)-$(B)", look), "1-$(B)");
    assert_eq!(expand("$$(A) $$ $", look), "$(A) $ $");
    assert_eq!(expand("$(A", look), "$(A");
    assert_eq!(expand("x$A", look), "x$A");
}

#[test]
fn host_aliases_join_the_hosts_file() {
    let y = "apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec:
  template:
    spec:
      hostAliases: [{ip: 10.9.9.9, hostnames: [store, store.lan]}]
      containers: [{name: c, image: i, command: ['true']}]
";
    let t = job(y);
    let hosts = hosts_file(&t, &spread(&t)).unwrap();
    assert_eq!(hosts, "# cadre job default/j\n10.9.9.9\tstore store.lan\n");
}

#[test]
fn in_containers_the_image_program_keeps_command_and_args_apart_and_expands_both() {
    let yaml = "apiVersion: batch/v1
kind: Job
metadata: {name: ranks}
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: registry.local/train:1
        command: [python3, train.py, '--index=$(JOB_COMPLETION_INDEX)']
        args: ['--out=/tmp/$(JOB_COMPLETION_INDEX)']
        workingDir: /app
      - name: d
        image: x
";
    let yaml = yaml.replace("      - name: d\n        image: x\n", "");
    let mut o = TranslateOptions::new("alice", "research", "/home/alice");
    o.container_runtime = true;
    let t = translate(&parse_documents(&yaml, "t").unwrap()[0], &o).unwrap();
    assert!(t.containers);
    let p = spread(&t);
    assert_eq!(
        rank_program(&t, 1, &p).unwrap(),
        Program::Image {
            command: Some(vec![
                "python3".into(),
                "train.py".into(),
                "--index=1".into()
            ]),
            args: vec!["--out=/tmp/1".into()],
        }
    );
    // The container starts in its workingDir; on the node, its output goes to the
    // submission directory.
    assert_eq!(t.work_dir(0).unwrap(), std::path::Path::new("/app"));
    assert_eq!(t.host_dir(0).unwrap(), std::path::Path::new("/home/alice"));
    assert_eq!(
        t.run_spec(0).unwrap().command,
        [
            "python3",
            "train.py",
            "--index=$(JOB_COMPLETION_INDEX)",
            "--out=/tmp/$(JOB_COMPLETION_INDEX)"
        ]
    );
}

#[test]
fn pods_carry_the_labels_kubernetes_and_the_operators_set_and_selectors_pick_them() {
    use cadre_k8s::{Selector, pod_labels};
    let indexed = job("apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    metadata: {labels: {app: bert, team: nlp}}
    spec:
      restartPolicy: Never
      containers: [{name: main, image: x, command: [python, t.py]}]
");
    let l1 = pod_labels(&indexed, 0, 1);
    assert_eq!(l1["app"], "bert");
    assert_eq!(l1["job-name"], "train");
    assert_eq!(l1["batch.kubernetes.io/job-completion-index"], "1");
    let pt = job("apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template: {spec: {containers: [{name: pytorch, image: x, command: [python, t.py]}]}}
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: pytorch, image: x, command: [python, t.py]}]}}
");
    let w1 = pod_labels(&pt, 1, 1);
    assert_eq!(w1["training.kubeflow.org/replica-type"], "worker");
    assert_eq!(w1["training.kubeflow.org/replica-index"], "1");
    assert_eq!(w1["training.kubeflow.org/job-name"], "ddp");
    let m0 = pod_labels(&pt, 0, 0);
    assert_eq!(m0["training.kubeflow.org/job-role"], "master");

    let sel = |s: &str| Selector::parse(s).unwrap_or_else(|e| panic!("{e}"));
    assert!(sel("app=bert,job-name==train").matches(&l1));
    assert!(sel("batch.kubernetes.io/job-completion-index in (0, 1)").matches(&l1));
    assert!(!sel("batch.kubernetes.io/job-completion-index notin (1)").matches(&l1));
    assert!(sel("team,!missing").matches(&l1));
    assert!(!sel("app!=bert").matches(&l1));
    assert!(sel("training.kubeflow.org/replica-type=worker").matches(&w1));
    assert!(!sel("training.kubeflow.org/replica-type=worker").matches(&m0));
    for bad in ["", "a b=c", "k in a,b", "=v", "k=a b"] {
        let e = Selector::parse(bad).expect_err(bad);
        assert!(!e.is_empty(), "{bad}");
    }
}
