//! The namespace objects (PriorityClass, Namespace, ResourceQuota, LimitRange) read and
//! applied as Kubernetes reads and applies them (see `cadre_k8s::namespaces`).

mod namespace_objects {
    use cadre_k8s::{Object, QueueSet, parse_documents};

    fn set(yaml: &str) -> Result<QueueSet, String> {
        let mut set = QueueSet::default();
        for o in parse_documents(yaml, "test").map_err(|e| e.to_string())? {
            set.apply_in(&o, "ml").map_err(|e| e.to_string())?;
        }
        Ok(set)
    }

    #[test]
    fn a_priority_class_becomes_a_cadre_class_with_kubernetes_checks() {
        let s = set("apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
globalDefault: true
preemptionPolicy: Never
description: for the deadline
")
        .unwrap();
        let c = &s.priority_classes[0];
        assert_eq!(c.config.value, 1000);
        assert!(!c.config.preempting, "Never does not preempt");
        assert_eq!(
            s.default_priority_class().map(|c| c.config.name.as_str()),
            Some("high")
        );
        let err = set("apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: system-mine}
value: 2000000000
preemptionPolicy: Sometimes
")
        .unwrap_err();
        assert!(
            err.contains("priority class names with 'system-' prefix are reserved"),
            "{err}"
        );
        assert!(
            err.contains("maximum allowed value of a user defined priority is 1000000000"),
            "{err}"
        );
        assert!(err.contains("Unsupported value: \"Sometimes\""), "{err}");
        let err = set("apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: a}
value: 1
globalDefault: true
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: b}
value: 2
globalDefault: true
")
        .unwrap_err();
        assert!(
            err.contains(
                "PriorityClass a is already marked as default. Only one default can exist"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_resource_quota_limits_what_cadre_books_and_refuses_the_rest_by_key() {
        let s = set("apiVersion: v1
kind: ResourceQuota
metadata: {name: team-quota}
spec:
  hard:
    requests.nvidia.com/gpu: 16
    requests.cpu: '64'
    limits.cpu: 40500m
    memory: 100.5Mi
")
        .unwrap();
        let q = &s.resource_quotas[0];
        assert_eq!(
            (q.namespace.as_str(), q.name.as_str()),
            ("ml", "team-quota")
        );
        assert_eq!(q.hard.gpu_milli, Some(16_000));
        assert_eq!(
            q.hard.cpus,
            Some(40),
            "the smaller, in whole cores rounded down"
        );
        assert_eq!(q.hard.mem_mib, Some(100));
        assert_eq!(s.quota_config().unwrap().namespaces, s.resource_quotas);
        // Object counts: ranks and workloads of a kind; a quota of them alone limits no
        // resource.
        let s = set("apiVersion: v1
kind: ResourceQuota
metadata: {name: counts}
spec:
  hard: {pods: 10, count/pods: '12', count/jobs.batch: 3, count/mpijobs.kubeflow.org: 1}
")
        .unwrap();
        let o = &s.object_quotas[0];
        assert_eq!(o.pods, Some(10), "the smaller of pods and count/pods");
        assert_eq!(o.workloads["jobs.batch"], 3);
        assert_eq!(o.workloads["mpijobs.kubeflow.org"], 1);
        assert!(s.quota_config().unwrap().namespaces.is_empty());
        // Kept objects and the claims' storage.
        let s = set("apiVersion: v1
kind: ResourceQuota
metadata: {name: kept}
spec:
  hard: {count/configmaps: 10, services: 1, persistentvolumeclaims: 4, count/secrets: 2, requests.storage: 1Ti}
")
        .unwrap();
        let o = &s.object_quotas[0];
        assert_eq!(
            (
                o.kept["ConfigMap"],
                o.kept["Service"],
                o.kept["PersistentVolumeClaim"],
                o.kept["Secret"]
            ),
            (10, 1, 4, 2)
        );
        assert_eq!(o.storage, Some(1 << 40));
        let err = set("apiVersion: v1
kind: ResourceQuota
metadata: {name: q, namespace: t}
spec:
  hard: {nvidia.com/gpu: 2, count/deployments.apps: 3, requests.ephemeral-storage: 1Ti}
  scopes: [BestEffort]
")
        .unwrap_err();
        for want in [
            "spec.hard[count/deployments.apps]: cadre counts workloads (jobs.batch, ",
            "and the objects it keeps (persistentvolumeclaims, services, configmaps, secrets)",
            "spec.hard[nvidia.com/gpu]: Invalid value: an extended resource's quota is written `requests.nvidia.com/gpu`",
            "spec.hard[requests.ephemeral-storage]: storage is not booked",
            "spec.scopes: quota scopes are not supported",
        ] {
            assert!(err.contains(want), "{want} in {err}");
        }
    }

    fn job(resources: &str) -> String {
        format!(
            "apiVersion: batch/v1
kind: Job
metadata: {{name: j, namespace: ml}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: i
        command: [train]
        resources: {resources}
"
        )
    }

    const RANGE: &str = "apiVersion: v1
kind: LimitRange
metadata: {name: bounds, namespace: ml}
spec:
  limits:
  - type: Container
    default: {cpu: '2', memory: 1Gi}
    defaultRequest: {cpu: '1'}
    max: {cpu: '4'}
    min: {memory: 256Mi}
    maxLimitRequestRatio: {cpu: '3'}
";

    fn plan(yaml: &str) -> Result<cadre_k8s::Plan, String> {
        let opts = cadre_k8s::TranslateOptions::new("u", "a", "/tmp");
        cadre_k8s::plan(yaml, "test", &opts).map_err(|e| e.to_string())
    }

    #[test]
    fn a_limit_range_gives_defaults_and_holds_containers_to_its_bounds() {
        // Defaults fill what the container leaves out; the range stands after the job.
        let p = plan(&format!("{}---\n{RANGE}", job("{}"))).unwrap();
        let spec = &p.workloads[0].spec;
        let task = &spec.groups[0].per_task;
        assert_eq!(
            (task.cpus, task.mem_mib),
            (2, 1024),
            "the default limits are booked"
        );
        assert_eq!(spec.annotations["k8s.limitRanges"], "bounds");
        // The range holds only in its namespace.
        let other = job("{}").replace("namespace: ml", "namespace: other");
        let p = plan(&format!("{other}---\n{RANGE}")).unwrap();
        assert_eq!(p.workloads[0].spec.groups[0].per_task.mem_mib, 0);
        let err = plan(&format!(
            "{}---\n{RANGE}",
            job("{limits: {cpu: '6', nvidia.com/gpu: 1}, requests: {memory: 100Mi}}")
        ))
        .unwrap_err();
        assert!(
            err.contains("Forbidden: maximum cpu usage per Container is 4, but limit is 6 (LimitRange `bounds`)"),
            "{err}"
        );
        assert!(
            err.contains("minimum memory usage per Container is 256Mi, but request is 100Mi"),
            "{err}"
        );
        let err = plan(&format!(
            "{}---\n{RANGE}",
            job("{limits: {cpu: '4'}, requests: {cpu: 500m}}")
        ))
        .unwrap_err();
        assert!(
            err.contains(
                "cpu max limit to request ratio per Container is 3, but provided ratio is 8.000000"
            ),
            "{err}"
        );
        // A limit given is also the request (the API server's defaulting comes before the
        // range's): 512Mi under a 1Gi default is taken as it is.
        let p = plan(&format!("{}---\n{RANGE}", job("{limits: {memory: 512Mi}}"))).unwrap();
        assert_eq!(p.workloads[0].spec.groups[0].per_task.mem_mib, 512);
        // A maximum with no default is the default limit, as the API server defaults a
        // LimitRange.
        let gpus = RANGE.replace("max: {cpu: '4'}", "max: {cpu: '4', nvidia.com/gpu: '2'}");
        let p = plan(&format!("{}---\n{gpus}", job("{}"))).unwrap();
        assert_eq!(p.workloads[0].spec.groups[0].per_task.gpus, 2);
        // The range itself is checked as Kubernetes checks it.
        let err = plan(
            &format!("{}---\n{RANGE}", job("{}")).replace("max: {cpu: '4'}", "max: {cpu: '1'}"),
        )
        .unwrap_err();
        assert!(
            err.contains(
                "spec.limits.default[cpu]: Invalid value: \"2\": must be less than or equal to \
                 max value 1"
            ),
            "{err}"
        );
        let err = plan(&RANGE.replace(
            "maxLimitRequestRatio: {cpu: '3'}",
            "maxLimitRequestRatio: {cpu: 500m}",
        ))
        .unwrap_err();
        assert!(
            err.contains("ratio must be greater than or equal to 1"),
            "{err}"
        );
        let err = plan(&RANGE.replace("defaultRequest: {cpu: '1'}", "defaultRequest: {cpu: '3'}"))
            .unwrap_err();
        assert!(
            err.contains(
                "Invalid value: \"3\": must be less than or equal to default limit value 2"
            ),
            "{err}"
        );
        let err = plan(&RANGE.replace("namespace: ml}", "namespace: Team A}")).unwrap_err();
        assert!(err.contains("`Team A` is not a DNS label"), "{err}");
        let pod = RANGE.replace("type: Container", "type: Pod");
        let err = plan(&pod).unwrap_err();
        assert!(err.contains("`Pod` limits are not supported"), "{err}");
    }

    #[test]
    fn a_namespace_is_kept_with_its_labels() {
        let s = set("apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {tier: gold}}
")
        .unwrap();
        assert_eq!(s.namespaces[0].name, "team-a");
        assert_eq!(s.namespaces[0].labels["tier"], "gold");
        let o = parse_documents(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
            "t",
        )
        .unwrap();
        assert!(matches!(o[0], Object::Namespace(_)));
    }
}
