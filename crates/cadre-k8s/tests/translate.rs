//! Each workload kind and each refusal, from small manifests written here.

use cadre_core::job::{NetworkSpan, NumaPolicy};
use cadre_k8s::{
    Completion, K8sError, Program, QueueRef, TranslateOptions, Translated, parse_documents, plan,
    translate,
};

fn opts() -> TranslateOptions {
    TranslateOptions::new("alice", "research", "/home/alice/runs")
}

fn one(yaml: &str) -> Result<Translated, K8sError> {
    let objects = parse_documents(yaml, "t.yaml")?;
    assert_eq!(objects.len(), 1);
    translate(&objects[0], &opts())
}

fn ok(yaml: &str) -> Translated {
    one(yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// The (path, reason) pairs of a refusal.
fn refused(yaml: &str) -> Vec<(String, String)> {
    match one(yaml) {
        Ok(t) => panic!("accepted: {t:?}"),
        Err(e) => {
            assert!(!e.problems().is_empty(), "not a refusal: {e}");
            e.problems()
                .iter()
                .map(|p| (p.path.clone(), p.reason.clone()))
                .collect()
        }
    }
}

fn assert_refused(yaml: &str, path: &str, words: &str) {
    let problems = refused(yaml);
    assert!(
        problems.iter().any(|(p, r)| p == path && r.contains(words)),
        "no refusal of {path} with `{words}` in {problems:#?}"
    );
}

/// An Indexed Job of `n` ranks with extra pod spec lines (indented 6 spaces) and container
/// lines (indented 8).
fn indexed(pod: &str, container: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: ranks
  labels: {{kueue.x-k8s.io/queue-name: user-queue, team: ml}}
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 3
  activeDeadlineSeconds: 600
  template:
    metadata:
      labels: {{app: ranks}}
    spec:
      restartPolicy: Never
      subdomain: ranks
{pod}      containers:
      - name: main
        image: python:3.12
        command: [python3, -c, 'import os; print(os.environ[\"JOB_COMPLETION_INDEX\"])']
{container}"
    )
}

#[test]
fn an_indexed_job_is_a_gang_of_completions_ranks() {
    let t = ok(&indexed("", ""));
    assert_eq!(t.name, "ranks");
    assert_eq!(t.namespace, "default");
    assert_eq!(t.spec.groups.len(), 1);
    let g = &t.spec.groups[0];
    assert_eq!((g.name.as_str(), g.count, g.min_count), ("task", 3, None));
    assert_eq!(
        (g.per_task.cpus, g.per_task.mem_mib, g.per_task.gpus),
        (1, 0, 0)
    );
    assert_eq!(t.spec.time_limit.0, 600);
    assert_eq!(t.spec.user, "alice");
    assert_eq!(t.spec.account, "research");
    assert_eq!(
        t.queue,
        Some(QueueRef::Kueue {
            namespace: "default".into(),
            local_queue: "user-queue".into()
        })
    );
    // A LocalQueue is resolved to its ClusterQueue later (QueueSet::route).
    assert_eq!(t.spec.queue, None);
    assert_eq!(
        t.spec.annotations["k8s.kueue.localQueue"],
        "default/user-queue"
    );
    assert_eq!(t.spec.annotations["k8s.label/team"], "ml");
    assert_eq!(t.spec.annotations["k8s.task.image"], "python:3.12");
    assert_eq!(t.completion, Completion::AllTasks);
    let run = t.run_spec(0).unwrap();
    assert_eq!(run.command[0], "python3");
    assert_eq!(run.work_dir.to_str(), Some("/home/alice/runs"));
    assert_eq!(run.export, cadre_core::run::Export::None);
    assert!(run.validate().is_ok());
}

#[test]
fn suspend_holds_and_priority_classes_must_agree() {
    let t = ok(&indexed("      priorityClassName: high\n", "")
        .replace("  activeDeadlineSeconds: 600\n", "  suspend: true\n"));
    assert!(t.spec.hold);
    assert_eq!(t.spec.priority_class.as_deref(), Some("high"));
    assert_eq!(t.spec.time_limit.0, 0);
    let y = indexed("      priorityClassName: high\n", "")
        .replace("team: ml}", "team: ml, kueue.x-k8s.io/priority-class: low}");
    assert_refused(
        &y,
        "spec.template.spec.priorityClassName",
        "differs from `low`",
    );
}

#[test]
fn parallelism_below_completions_is_not_a_gang() {
    let y = indexed("", "").replace("  parallelism: 3\n", "");
    assert_refused(
        &y,
        "spec.parallelism",
        "parallelism 1 (the default) is below completions 3",
    );
    let y = indexed("", "").replace("  parallelism: 3\n", "  parallelism: 2\n");
    assert_refused(&y, "spec.parallelism", "job array");
    // Parallelism above completions is capped by Kubernetes too.
    let y = indexed("", "").replace("  parallelism: 3\n", "  parallelism: 9\n");
    assert_eq!(ok(&y).spec.groups[0].count, 3);
}

#[test]
fn plain_jobs_one_pod_or_equal_counts_and_no_work_queues() {
    let plain = |spec: &str| {
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: p}}\nspec:\n{spec}  template:\n    spec:\n      containers: [{{name: c, command: ['true']}}]\n"
        )
    };
    assert_eq!(ok(&plain("")).spec.groups[0].count, 1);
    assert_eq!(
        ok(&plain("  completions: 4\n  parallelism: 4\n"))
            .spec
            .groups[0]
            .count,
        4
    );
    assert_refused(
        &plain("  parallelism: 4\n"),
        "spec.parallelism",
        "work-queue",
    );
    assert_refused(
        &plain("  podFailurePolicy: {rules: []}\n"),
        "spec.podFailurePolicy",
        "not supported",
    );
    assert_refused(
        &plain("  managedBy: kueue.x-k8s.io/multikueue\n"),
        "spec.managedBy",
        "another controller",
    );
}

#[test]
fn placement_constraints_map_onto_the_job() {
    let pod = "      nodeSelector: {gpu: a100}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: zone, operator: In, values: [z1]}
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: ranks}}
            topologyKey: kubernetes.io/hostname
      tolerations:
      - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
";
    let t = ok(&indexed(pod, ""));
    assert_eq!(
        t.spec.node_selector,
        [
            ("gpu".to_string(), "a100".to_string()),
            ("zone".into(), "z1".into())
        ]
    );
    assert!(t.spec.one_task_per_node);
    assert_eq!(
        t.spec.annotations["k8s.task.tolerations"],
        "nvidia.com/gpu exists:NoSchedule"
    );
}

#[test]
fn affinities_cadre_cannot_express_are_refused() {
    let affinity = |a: &str| indexed(&format!("      affinity:\n{a}"), "");
    let terms = "        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n";
    assert_refused(
        &affinity(&format!(
            "{terms}            - matchExpressions: [{{key: zone, operator: NotIn, values: [z1]}}]\n"
        )),
        "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
        "operator `NotIn` is not supported",
    );
    assert_refused(
        &affinity(&format!(
            "{terms}            - matchExpressions: [{{key: zone, operator: In, values: [a, b]}}]\n"
        )),
        "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
        "several values",
    );
    assert_refused(
        &affinity(&format!(
            "{terms}            - matchExpressions: [{{key: a, operator: In, values: [x]}}]\n            - matchExpressions: [{{key: b, operator: In, values: [y]}}]\n"
        )),
        "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        "several node selector terms",
    );
    let anti =
        "        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n";
    assert_refused(
        &affinity(&format!(
            "{anti}          - {{labelSelector: {{matchLabels: {{app: ranks}}}}, topologyKey: topology.kubernetes.io/zone}}\n"
        )),
        "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        "`kubernetes.io/hostname` only",
    );
    assert_refused(
        &affinity(&format!(
            "{anti}          - {{labelSelector: {{matchLabels: {{app: other}}}}, topologyKey: kubernetes.io/hostname}}\n"
        )),
        "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector",
        "the job's own pods",
    );
    assert_refused(
        &affinity("        podAffinity: {}\n"),
        "spec.template.spec.affinity.podAffinity",
        "not supported",
    );
}

#[test]
fn kueue_topology_annotations_become_spans() {
    let with = |level: &str| {
        indexed("", "").replace(
            "      labels: {app: ranks}\n",
            &format!(
                "      labels: {{app: ranks}}\n      annotations: {{kueue.x-k8s.io/podset-required-topology: {level}}}\n"
            ),
        )
    };
    assert_eq!(
        ok(&with("cloud.provider.com/topology-rack"))
            .spec
            .topology
            .span,
        NetworkSpan::OneLeaf
    );
    assert_eq!(
        ok(&with("cloud.provider.com/topology-block"))
            .spec
            .topology
            .span,
        NetworkSpan::OneBlock
    );
    let node = ok(&with("kubernetes.io/hostname"));
    assert_eq!(node.spec.topology.span, NetworkSpan::Any);
    assert_eq!(node.spec.groups[0].nodes, Some(1));
    assert_refused(
        &with("topology.kubernetes.io/zone"),
        "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topology]",
        "no counterpart in cadre's topology",
    );
    let pref = indexed("", "").replace(
        "      labels: {app: ranks}\n",
        "      labels: {app: ranks}\n      annotations: {kueue.x-k8s.io/podset-preferred-topology: x/rack}\n",
    );
    assert_eq!(ok(&pref).spec.topology.span, NetworkSpan::Any);
    let slice = indexed("", "").replace(
        "      labels: {app: ranks}\n",
        "      labels: {app: ranks}\n      annotations: {kueue.x-k8s.io/podset-slice-size: \"2\"}\n",
    );
    assert_refused(
        &slice,
        "spec.template.metadata.annotations[kueue.x-k8s.io/podset-slice-size]",
        "not supported",
    );
}

#[test]
fn resources_follow_kubernetes_requests_and_limits() {
    let res = |r: &str| {
        ok(&indexed("", &format!("        resources:\n{r}")))
            .spec
            .groups[0]
            .per_task
            .clone()
    };
    let r = res("          requests: {cpu: 500m, memory: 1G}\n");
    assert_eq!((r.cpus, r.mem_mib), (1, 954));
    // A limit alone is the request; a limit above the request is what is booked.
    let r = res(
        "          requests: {cpu: 2, memory: 1Gi}\n          limits: {cpu: 3, memory: 2Gi, nvidia.com/gpu: 2}\n",
    );
    assert_eq!((r.cpus, r.mem_mib, r.gpus), (3, 2048, 2));
    let r = res(
        "          limits: {nvidia.com/mig-1g.10gb: 1, rdma/hca: 2, example.com/fpga: 1, ephemeral-storage: 10Gi}\n",
    );
    assert_eq!(
        (r.gpus, r.gpu_model.as_deref(), r.nics),
        (1, Some("mig-1g.10gb"), 2)
    );
    assert_eq!(r.named, [("example.com/fpga".to_string(), 1)]);
    let bad = |r: &str, path: &str, words: &str| {
        assert_refused(
            &indexed("", &format!("        resources:\n{r}")),
            path,
            words,
        )
    };
    let at = "spec.template.spec.containers[0].resources";
    bad(
        "          requests: {cpu: 2}\n          limits: {cpu: 1}\n",
        &format!("{at}.limits[cpu]"),
        "below the request",
    );
    bad(
        "          limits: {nvidia.com/gpu: 500m}\n",
        &format!("{at}.limits[nvidia.com/gpu]"),
        "not a whole number",
    );
    bad(
        "          limits: {hugepages-2Mi: 1Gi}\n",
        &format!("{at}.limits[hugepages-2Mi]"),
        "huge pages",
    );
    bad(
        "          limits: {memory: 1GB}\n",
        &format!("{at}.limits[memory]"),
        "unknown suffix",
    );
    bad(
        "          limits: {nvidia.com/gpu: 1, nvidia.com/mig-1g.10gb: 1}\n",
        &format!("{at}.limits"),
        "GPUs of one kind",
    );
    bad(
        "          limits: {amd.com/gpu: 1}\n",
        &format!("{at}.limits[amd.com/gpu]"),
        "not supported",
    );
}

#[test]
fn environment_values_and_refusals() {
    let env = "        env:
        - {name: A, value: one}
        - name: POD
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: IDX
          valueFrom: {fieldRef: {fieldPath: \"metadata.annotations['batch.kubernetes.io/job-completion-index']\"}}
        - name: APP
          valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}
        - name: MEM
          valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
        resources: {limits: {memory: 512Mi}}
";
    let t = ok(&indexed("", env));
    use cadre_k8s::EnvSource::*;
    let sources: Vec<_> = t.groups[0].env.iter().map(|e| e.source.clone()).collect();
    assert_eq!(
        sources,
        [
            Literal("one".into()),
            PodName,
            PodIp,
            CompletionIndex,
            Literal("ranks".into()),
            Literal("512".into())
        ]
    );
    let refuse = |v: &str, path: &str, words: &str| {
        assert_refused(
            &indexed(
                "",
                &format!("        env:\n        - name: X\n          valueFrom: {v}\n"),
            ),
            path,
            words,
        )
    };
    let at = "spec.template.spec.containers[0].env[0].valueFrom";
    refuse(
        "{resourceFieldRef: {resource: limits.ephemeral-storage}}",
        &format!("{at}.resourceFieldRef"),
        "limits.ephemeral-storage",
    );
    refuse(
        "{fieldRef: {fieldPath: metadata.uid}}",
        &format!("{at}.fieldRef.fieldPath"),
        "`metadata.uid` is not supported",
    );
    assert_refused(
        &indexed("", "        envFrom: [{}]\n"),
        "spec.template.spec.containers[0].envFrom[0]",
        "name one configMapRef or one secretRef",
    );
}

#[test]
fn pod_features_cadre_does_not_have_are_refused_by_path() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "      volumes: [{name: data, nfs: {server: files, path: /data}}]\n",
            "",
            "spec.template.spec.volumes[0]",
            "nfs volumes are not supported yet",
        ),
        (
            "",
            "        volumeMounts: [{name: data, mountPath: /data}]\n",
            "spec.template.spec.containers[0].volumeMounts[0].name",
            "`data` is not a volume of the pod",
        ),
        (
            "      initContainers: [{name: i, image: busybox}]\n",
            "",
            "spec.template.spec.initContainers",
            "init containers",
        ),
        (
            "",
            "        readinessProbe: {exec: {command: ['true']}}\n",
            "spec.template.spec.containers[0].readinessProbe",
            "probes",
        ),
        (
            "",
            "        lifecycle: {preStop: {exec: {command: ['true']}}}\n",
            "spec.template.spec.containers[0].lifecycle",
            "hooks",
        ),
        (
            "",
            "        securityContext: {privileged: true}\n",
            "spec.template.spec.containers[0].securityContext.privileged",
            "privileged",
        ),
        (
            "",
            "        tty: true\n",
            "spec.template.spec.containers[0].tty",
            "terminal",
        ),
        (
            "      serviceAccountName: robot\n",
            "",
            "spec.template.spec.serviceAccountName",
            "no Kubernetes API",
        ),
        (
            "      nodeName: n1\n",
            "",
            "spec.template.spec.nodeName",
            "bypasses the scheduler",
        ),
        (
            "      topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]\n",
            "",
            "spec.template.spec.topologySpreadConstraints",
            "not supported",
        ),
        (
            "      schedulingGates: [{name: g}]\n",
            "",
            "spec.template.spec.schedulingGates",
            "held",
        ),
        (
            "      priority: 100\n",
            "",
            "spec.template.spec.priority",
            "priorityClassName",
        ),
        (
            "      preemptionPolicy: Never\n",
            "",
            "spec.template.spec.preemptionPolicy",
            "priority class",
        ),
        (
            "      dnsConfig: {nameservers: [1.1.1.1]}\n",
            "",
            "spec.template.spec.dnsConfig",
            "hosts file",
        ),
    ];
    for (pod, container, path, words) in cases {
        assert_refused(&indexed(pod, container), path, words);
    }
    // Accepted and ignored: no meaning outside Kubernetes.
    let t = ok(&indexed(
        "      hostNetwork: true\n      dnsPolicy: ClusterFirstWithHostNet\n      schedulerName: volcano\n      imagePullSecrets: [{name: r}]\n      securityContext: {runAsUser: 1000}\n      terminationGracePeriodSeconds: 90\n",
        "        imagePullPolicy: Always\n        workingDir: /work\n        ports: [{containerPort: 8080, name: http}]\n",
    ));
    assert_eq!(t.kill_wait_secs, 90);
    assert_eq!(t.spec.annotations["k8s.task.runAsUser"], "1000");
    assert_eq!(t.work_dir(0).unwrap().to_str(), Some("/work"));
    assert_eq!(t.groups[0].ports[0].port, 8080);
}

#[test]
fn several_containers_and_missing_commands() {
    let y = indexed(
        "",
        "      - {name: side, image: busybox, command: [sleep, inf]}\n",
    );
    assert_refused(&y, "spec.template.spec.containers[1]", "several containers");
    let y = indexed("", "").replace(
        "        command: [python3, -c, 'import os; print(os.environ[\"JOB_COMPLETION_INDEX\"])']\n",
        "        args: [--x]\n",
    );
    assert_refused(
        &y,
        "spec.template.spec.containers[0].command",
        "image's entrypoint (image `python:3.12`) with args [\"--x\"]",
    );
    let mut o = opts();
    o.container_runtime = true;
    let t = translate(&parse_documents(&y, "t").unwrap()[0], &o).unwrap();
    assert_eq!(
        t.groups[0].program,
        Program::Image {
            command: None,
            args: vec!["--x".into()]
        }
    );
    // `latest` and untagged images are pulled always, as in Kubernetes.
    assert_eq!(
        t.groups[0].pull_policy,
        Some(cadre_k8s::PullPolicy::IfNotPresent)
    );
    let run = t.run_spec(0).unwrap();
    assert_eq!(run.command, ["(image entrypoint)", "--x"]);
}

#[test]
fn added_capabilities_are_carried_for_images_and_refused_on_the_host() {
    let container = "        securityContext: {capabilities: {add: [IPC_LOCK, cap_sys_nice, IPC_LOCK], drop: [ALL]}}\n";
    let y = indexed("", container);
    assert_refused(
        &y,
        "spec.template.spec.containers[0].securityContext.capabilities.add",
        "cannot be granted to tasks on the host",
    );
    let mut o = opts();
    o.container_runtime = true;
    let t = translate(&parse_documents(&y, "t").unwrap()[0], &o).unwrap();
    assert_eq!(t.groups[0].capabilities, ["IPC_LOCK", "SYS_NICE"]);
    // Unknown names, and ALL, are refused by position.
    let y = indexed(
        "",
        "        securityContext: {capabilities: {add: [IPC_LOCK, ALL, FLY]}}\n",
    );
    let problems = match translate(&parse_documents(&y, "t").unwrap()[0], &o) {
        Ok(t) => panic!("accepted: {t:?}"),
        Err(e) => e.problems().to_vec(),
    };
    let at = "spec.template.spec.containers[0].securityContext.capabilities.add";
    let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, [format!("{at}[1]"), format!("{at}[2]")]);
    assert!(
        problems[1]
            .reason
            .starts_with("`FLY` is not a Linux capability"),
        "{problems:?}"
    );
    assert_eq!(cadre_k8s::capability("Cap_Chown"), Some("CHOWN"));
    assert_eq!(cadre_k8s::capability("ALL"), None);
}

#[test]
fn metadata_rules() {
    let y = indexed("", "").replace("  name: ranks\n", "  generateName: ranks-\n");
    assert_refused(&y, "metadata.generateName", "needs metadata.name");
    // With a suffix chosen by the caller (`cadre apply`), the name is the prefix and it; a
    // long prefix is cut to leave room for it, as the API server does.
    let objects = parse_documents(&y, "t.yaml").unwrap();
    let mut o = opts();
    o.generated_suffix = Some("x7k2q".into());
    assert_eq!(translate(&objects[0], &o).unwrap().name, "ranks-x7k2q");
    let long = indexed("", "").replace(
        "  name: ranks\n",
        &format!("  generateName: {}-\n", "r".repeat(70)),
    );
    let objects = parse_documents(&long, "t.yaml").unwrap();
    let t = translate(&objects[0], &o).unwrap();
    assert_eq!(t.name.len(), 63);
    assert!(t.name.ends_with("rx7k2q"), "{}", t.name);
    let bad = indexed("", "").replace("  name: ranks\n", "  generateName: Ranks-\n");
    let objects = parse_documents(&bad, "t.yaml").unwrap();
    let err = translate(&objects[0], &o).unwrap_err().to_string();
    assert!(
        err.contains("`Ranks-` makes names such as `Ranks-x7k2q`"),
        "{err}"
    );
    let y = indexed("", "").replace("  name: ranks\n", "  name: Ranks\n");
    assert_refused(&y, "metadata.name", "DNS label");
    let y = indexed("", "").replace("team: ml}", "team: ml, scheduling.x-k8s.io/pod-group: g}");
    assert_refused(
        &y,
        "metadata.labels[scheduling.x-k8s.io/pod-group]",
        "not supported",
    );
}

const MPI: &str = "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: bench, namespace: hpc}
spec:
  slotsPerWorker: 4
  mpiImplementation: Intel
  runPolicy: {backoffLimit: 2, activeDeadlineSeconds: 3600, schedulingPolicy: {queue: gpu-q, priorityClass: high}}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers: [{name: l, image: m, command: [mpirun, -n, '8', ./bench]}]
    Worker:
      replicas: 2
      template:
        metadata: {labels: {role: w}}
        spec:
          affinity:
            podAntiAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
              - {labelSelector: {matchLabels: {role: w}}, topologyKey: kubernetes.io/hostname}
          containers:
          - name: w
            image: m
            resources: {limits: {nvidia.com/gpu: 4, rdma/ib: 1}}
";

#[test]
fn an_mpijob_is_a_launcher_and_workers() {
    let t = ok(MPI);
    let shape: Vec<_> = t
        .spec
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.count, g.per_task.gpus, g.per_task.nics))
        .collect();
    assert_eq!(shape, [("launcher", 1, 0, 0), ("worker", 2, 4, 1)]);
    // Workers without a command run sshd, as the MPI Operator makes them.
    assert_eq!(
        t.groups[1].program,
        Program::Argv(vec!["/usr/sbin/sshd".into(), "-De".into()])
    );
    assert_eq!(t.spec.queue.as_deref(), Some("gpu-q"));
    assert_eq!(t.spec.priority_class.as_deref(), Some("high"));
    assert_eq!(t.spec.time_limit.0, 3600);
    assert!(t.spec.one_task_per_node);
    assert_eq!(t.spec.annotations["k8s.backoffLimit"], "2");
    assert_eq!(t.completion, Completion::Groups(vec![0]));
    assert_eq!(t.ssh.as_ref().unwrap().mount_path, "/root/.ssh");
    assert_eq!(t.namespace, "hpc");
    // The operator's own pod labels select the job's pods too.
    let y = MPI.replace(
        "{labelSelector: {matchLabels: {role: w}}",
        "{labelSelector: {matchLabels: {training.kubeflow.org/job-role: worker}}",
    );
    assert!(ok(&y).spec.one_task_per_node);
    assert_refused(
        &MPI.replace("queue: gpu-q,", "minAvailable: 2, queue: gpu-q,"),
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "starts an MPIJob whole",
    );
    assert_refused(
        &MPI.replace("Intel", "MVAPICH"),
        "spec.mpiImplementation",
        "OpenMPI, Intel and MPICH",
    );
    assert_refused(
        &MPI.replace("replicas: 1\n", "replicas: 2\n"),
        "spec.mpiReplicaSpecs.Launcher.replicas",
        "one launcher",
    );
    assert_refused(
        &MPI.replace(
            "metadata: {name: bench, namespace: hpc}",
            "metadata: {name: bench, namespace: hpc, labels: {kueue.x-k8s.io/queue-name: lq}}",
        ),
        "spec.runPolicy.schedulingPolicy.queue",
        "name one",
    );
}

const TORCH: &str = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  nprocPerNode: \"8\"
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: t
            command: [torchrun, train.py]
            ports: [{name: pytorchjob-port, containerPort: 29500}]
            resources: {limits: {nvidia.com/gpu: 8}}
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - {name: pytorch, image: t, command: [torchrun, train.py], resources: {limits: {nvidia.com/gpu: 8}}}
";

#[test]
fn a_pytorchjob_is_a_master_and_workers() {
    let t = ok(TORCH);
    let shape: Vec<_> = t
        .spec
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.count, g.min_count))
        .collect();
    assert_eq!(shape, [("master", 1, None), ("worker", 3, None)]);
    assert_eq!(t.completion, Completion::Groups(vec![0]));
    let elastic = TORCH.replace(
        "  nprocPerNode: \"8\"\n",
        "  nprocPerNode: \"8\"\n  elasticPolicy: {minReplicas: 2, maxReplicas: 3, rdzvBackend: c10d}\n",
    );
    let t = ok(&elastic);
    assert_eq!(t.spec.groups[1].min_count, Some(2));
    assert!(t.spec.is_elastic());
    assert_refused(
        &TORCH.replace(
            "  nprocPerNode: \"8\"\n",
            "  elasticPolicy: {minReplicas: 1, maxReplicas: 2}\n",
        ),
        "spec.elasticPolicy.maxReplicas",
        "below the 3 worker replicas",
    );
    assert_refused(
        &TORCH.replace(
            "  nprocPerNode: \"8\"\n",
            "  runPolicy: {schedulingPolicy: {minAvailable: 2}}\n",
        ),
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "elasticPolicy.minReplicas",
    );
    assert_refused(
        &TORCH.replace(
            "    Master:\n      replicas: 1\n",
            "    Master:\n      replicas: 2\n",
        ),
        "spec.pytorchReplicaSpecs.Master.replicas",
        "one master",
    );
}

const VOLCANO: &str = "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vj}
spec:
  minAvailable: 3
  queue: research
  plugins: {env: [], svc: [], ssh: []}
  tasks:
  - name: ps
    replicas: 1
    policies: [{event: TaskCompleted, action: CompleteJob}]
    template:
      spec:
        containers: [{name: ps, image: x, command: [serve]}]
  - name: worker
    replicas: 2
    topologyPolicy: single-numa-node
    template:
      spec:
        containers: [{name: w, image: x, command: [train], resources: {limits: {nvidia.com/gpu: 1}}}]
";

#[test]
fn a_volcano_job_is_one_group_per_task() {
    let t = ok(VOLCANO);
    let shape: Vec<_> = t
        .spec
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.count, g.min_count))
        .collect();
    assert_eq!(shape, [("ps", 1, None), ("worker", 2, None)]);
    assert_eq!(t.spec.queue.as_deref(), Some("research"));
    assert_eq!(t.completion, Completion::Groups(vec![0]));
    assert_eq!(t.spec.topology.numa, NumaPolicy::Strict);
    assert_eq!(t.ssh.as_ref().unwrap().mount_path, "/root/.ssh");
    // Per-task minimums that add up to the job's.
    let t = ok(&VOLCANO
        .replace("minAvailable: 3", "minAvailable: 2")
        .replace(
            "    replicas: 2\n",
            "    replicas: 2\n    minAvailable: 1\n",
        ));
    assert_eq!(t.spec.groups[1].min_count, Some(1));
    assert_refused(
        &VOLCANO.replace("minAvailable: 3", "minAvailable: 2"),
        "spec.minAvailable",
        "differs from the sum 3",
    );
    assert_refused(
        &VOLCANO.replace("{env: [], svc: [], ssh: []}", "{pytorch: [--port=5000]}"),
        "spec.plugins.pytorch",
        "env, svc and ssh",
    );
    assert_refused(
        &VOLCANO.replace(
            "    topologyPolicy: single-numa-node\n",
            "    dependsOn: {name: [ps]}\n",
        ),
        "spec.tasks[1].dependsOn",
        "ordered start",
    );
    assert_refused(
        &VOLCANO.replace("action: CompleteJob", "action: ResumeJob"),
        "spec.tasks[0].policies[0]",
        "`TaskCompleted` with action `ResumeJob`",
    );
    assert_refused(
        &VOLCANO.replace(
            "  queue: research\n",
            "  queue: research\n  minSuccess: 1\n",
        ),
        "spec.minSuccess",
        "some of its tasks",
    );
}

#[test]
fn job_wide_merges_refuse_conflicts() {
    let y = VOLCANO
        .replace(
            "        containers: [{name: ps,",
            "        nodeSelector: {pool: a}\n        containers: [{name: ps,",
        )
        .replace(
            "        containers: [{name: w,",
            "        nodeSelector: {pool: b}\n        containers: [{name: w,",
        );
    assert_refused(
        &y,
        "spec.tasks[1].template.spec.nodeSelector",
        "`pool` is asked to be `b` here and `a`",
    );
    // Different labels are united.
    let y = VOLCANO
        .replace(
            "        containers: [{name: ps,",
            "        nodeSelector: {pool: a}\n        containers: [{name: ps,",
        )
        .replace(
            "        containers: [{name: w,",
            "        nodeSelector: {gpu: h100}\n        containers: [{name: w,",
        );
    assert_eq!(ok(&y).spec.node_selector.len(), 2);
}

#[test]
fn jobsets_name_their_groups_after_replicated_jobs() {
    let y = "apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js}
spec:
  successPolicy: {operator: All, targetReplicatedJobs: [driver]}
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
  - name: driver
    template:
      spec:
        template:
          spec:
            containers: [{name: d, image: x, command: [drive]}]
";
    let t = ok(y);
    let shape: Vec<_> = t
        .spec
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.count))
        .collect();
    assert_eq!(shape, [("workers", 4), ("driver", 1)]);
    assert_eq!(t.completion, Completion::Groups(vec![1]));
    assert_refused(
        &y.replace(
            "  successPolicy",
            "  startupPolicy: {startupPolicyOrder: InOrder}\n  successPolicy",
        ),
        "spec.startupPolicy.startupPolicyOrder",
        "ordered start",
    );
}

#[test]
fn queue_objects_become_cadre_queues() {
    let y = "apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {gpu: h100}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: org
  fairSharing: {weight: \"2\"}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 8, lendingLimit: 4}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: team-a}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec:
  weight: 4
  capability: {nvidia.com/gpu: 16}
  deserved: {nvidia.com/gpu: 8}
  guarantee: {resource: {nvidia.com/gpu: 2}}
";
    let p = plan(y, "q.yaml", &opts()).unwrap();
    let a = &p.queues.queues[0].config;
    assert_eq!(a.cohort.as_deref(), Some("org"));
    assert_eq!(a.weight, 2);
    assert_eq!(
        (a.nominal.cpus, a.nominal.mem_mib, a.nominal.gpu_milli),
        (Some(64), Some(512 * 1024), Some(8000))
    );
    assert_eq!(a.borrowing_limit.unwrap().gpu_milli, Some(8000));
    assert_eq!(a.lending_limit.unwrap().gpu_milli, Some(4000));
    assert_eq!(
        p.queues.node_selector("team-a"),
        [("gpu".into(), "h100".into())]
    );
    let v = &p.queues.queues[1].config;
    assert_eq!(
        (v.name.as_str(), v.weight, v.cohort.as_deref()),
        ("research", 4, Some("volcano"))
    );
    assert_eq!(v.nominal.gpu_milli, Some(8000));
    assert_eq!(v.capability.unwrap().gpu_milli, Some(16_000));
    assert_eq!(v.lending_limit.unwrap().gpu_milli, Some(6000));
    p.queues.quota_config().unwrap();
    let kueue = QueueRef::Kueue {
        namespace: "ml".into(),
        local_queue: "lq".into(),
    };
    assert_eq!(p.queues.route(&kueue).unwrap(), "team-a");
    let missing = QueueRef::Kueue {
        namespace: "other".into(),
        local_queue: "lq".into(),
    };
    assert!(
        p.queues
            .route(&missing)
            .unwrap_err()
            .to_string()
            .contains("does not exist in namespace `other`")
    );
    assert_eq!(
        p.queues
            .route(&QueueRef::Direct {
                queue: "research".into()
            })
            .unwrap(),
        "research"
    );
}

#[test]
fn queue_features_cadre_lacks_are_refused() {
    let cq = |spec: &str| {
        format!(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: q}}\nspec:\n{spec}"
        )
    };
    let groups = "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - {name: a, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}\n";
    let refused = |y: &str, path: &str, words: &str| {
        let e = plan(y, "q", &opts()).unwrap_err();
        assert!(
            e.problems()
                .iter()
                .any(|p| p.path == path && p.reason.contains(words)),
            "{e}"
        );
    };
    refused(
        &cq(&format!(
            "{groups}    - {{name: b, resources: [{{name: nvidia.com/gpu, nominalQuota: 8}}]}}\n"
        )),
        "spec.resourceGroups[0].flavors[1].name",
        "one flavor",
    );
    refused(
        &cq(&format!("  cohort: x\n{groups}")),
        "spec.cohort",
        "`cohortName`",
    );
    refused(
        &cq(
            "  resourceGroups:\n  - coveredResources: [pods]\n    flavors:\n    - {name: a, resources: [{name: pods, nominalQuota: 8}]}\n",
        ),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "quota on `pods`",
    );
    refused(
        &cq(&format!(
            "  preemption: {{withinClusterQueue: LowerPriority}}\n{groups}"
        )),
        "spec.preemption.withinClusterQueue",
        "priority classes",
    );
    // The core's own rule: borrowing limits only in a cohort.
    refused(
        &cq(
            "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - {name: a, resources: [{name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 2}]}\n",
        ),
        "spec",
        "is in no cohort",
    );
    let vq = |spec: &str| {
        format!(
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: v}}\nspec:\n{spec}"
        )
    };
    refused(&vq("  parent: eng\n"), "spec.parent", "hierarchical");
    refused(
        &vq("  reclaimable: false\n"),
        "spec.reclaimable",
        "cannot be reclaimed",
    );
    refused(
        &vq("  guarantee: {resource: {cpu: 2}}\n"),
        "spec.guarantee",
        "needs `deserved`",
    );
    refused(&vq("  weight: 0\n"), "spec.weight", "1 to 65535");
}
