//! PersistentVolumeClaims in the controller: who may apply them, which jobs mount them, and
//! what a launch order says of them.
//!
//! **Given** the objects applied ([`QueueObjects`]) and a job's spec and run spec.
//! **Decided**: whether a change of objects is the applier's to make (every kind but
//! PersistentVolumeClaim is an administrator's; a claim is its owner's or an
//! administrator's); which claims a workload mounts (read from the translation its run
//! spec carries, the one the agents run, and recorded by the controller in the job's
//! annotation [`CLAIMS_ANNOTATION`], which no submitter can give); the claims of a launch
//! order. **Must hold**: a job mounts only claims of its own namespace that its own user
//! owns; a claim that a job not ended mounts is not deleted, nor is the class of a claim.

use crate::queues::QueueObjects;
use cadre_core::job::JobSpec;
use cadre_core::run::RunSpec;
use cadre_k8s::storage::{claims_of, is_owned_kind};
use cadre_k8s::{WORKLOAD_RUN_VERSION, WorkloadRun, queue_object_name};
use cadre_proto::agent::ClaimMount;
use cadre_proto::api::QueueObjectRef;

/// The annotation in which the controller records the claims a job mounts (`a,b`).
pub const CLAIMS_ANNOTATION: &str = "k8s.claims";

/// The annotation in which the controller records the node paths a job mounts (`hostPath`
/// volumes, `/a,/b`), which the API took from an administrator only
/// (`crate::authority::check_host_paths`).
pub const HOST_PATHS_ANNOTATION: &str = "k8s.hostPaths";

/// Why `user` may not make this change, if they may not: an administrator may make any;
/// anyone else may apply and delete PersistentVolumeClaims only, and only their own.
pub fn forbidden(
    objects: &QueueObjects,
    put: &[serde_json::Value],
    delete: &[QueueObjectRef],
    default_namespace: &str,
    user: &str,
    admin: bool,
) -> Option<String> {
    if admin {
        return None;
    }
    let not_admin = |kind: &str| {
        Some(format!(
            "only an administrator may apply or delete queue objects (here a {kind}; queue, \
             namespace and storage objects are the cluster's); `{user}` is not one: a user \
             applies and deletes PersistentVolumeClaims, Services, ConfigMaps and Secrets, their own"
        ))
    };
    let owned_by_other = |kind: &str, namespace: &str, name: &str| {
        let record = objects
            .records()
            .iter()
            .find(|r| r.kind == kind && r.namespace == namespace && r.name == name)?;
        let owner = owner_of(&record.manifest).unwrap_or_default();
        (owner != user).then(|| {
            format!(
                "{kind} `{name}` in namespace {namespace} belongs to `{owner}`; only its owner \
                 or an administrator may change or delete it"
            )
        })
    };
    for manifest in put {
        let Ok(mut objs) = cadre_k8s::parse_numbered(&manifest.to_string(), "object") else {
            continue; // The change itself says what is wrong with it.
        };
        let Some((_, object)) = objs.pop() else {
            continue;
        };
        if !is_owned_kind(object.kind()) {
            return not_admin(object.kind());
        }
        if let Some(n) = queue_object_name(&object, default_namespace)
            && let Some(why) = owned_by_other(n.kind, &n.namespace, &n.name)
        {
            return Some(why);
        }
    }
    for d in delete {
        if !is_owned_kind(&d.kind) {
            return not_admin(&d.kind);
        }
        if let Some(why) = owned_by_other(&d.kind, &d.namespace, &d.name) {
            return Some(why);
        }
    }
    None
}

/// The owner a kept object's stored manifest records.
fn owner_of(manifest: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(manifest).ok()?;
    cadre_k8s::storage::owner_of(&v).map(str::to_string)
}

/// Prepares a submitted job's workload (read once from its run spec): records what it
/// mounts (`record_mounts`) and puts in the values of the Secrets it uses
/// (`attach_secrets`). Any [`CLAIMS_ANNOTATION`] or [`HOST_PATHS_ANNOTATION`] the
/// submitter gave is removed first; a run spec that carries no translation mounts and uses
/// nothing.
pub fn prepare_workload(
    objects: &QueueObjects,
    spec: &mut JobSpec,
    run: &mut RunSpec,
    key: &str,
) -> Result<(), String> {
    spec.annotations.remove(CLAIMS_ANNOTATION);
    spec.annotations.remove(HOST_PATHS_ANNOTATION);
    let mut t = match cadre_k8s::workload_of(run) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(()),
        Err(e) => return Err(format!("the workload the job carries cannot be read: {e}")),
    };
    record_mounts(objects, spec, &t, key)?;
    if t.secrets.0.is_empty() {
        return Ok(());
    }
    attach_secrets(objects, spec, &mut t)?;
    let carried = WorkloadRun {
        version: WORKLOAD_RUN_VERSION,
        workload: t,
    };
    run.kubernetes = Some(serde_json::to_value(&carried).map_err(|e| e.to_string())?);
    Ok(())
}

/// Records in `spec` the claims workload `t` mounts, after checking each is applied in the
/// workload's namespace and is its user's, and the node paths it mounts under the
/// controller's seal (`key`: the cluster's key; the API took them from an administrator
/// only).
fn record_mounts(
    objects: &QueueObjects,
    spec: &mut JobSpec,
    t: &cadre_k8s::Translated,
    key: &str,
) -> Result<(), String> {
    let paths = cadre_k8s::storage::host_paths_of(t);
    if !paths.is_empty() {
        if key.is_empty() {
            return Err(
                "hostPath volumes need the cluster's key, which this controller lacks".into(),
            );
        }
        let paths = paths.join(",");
        let code = cadre_proto::job_token::seal(key, &host_paths_sealed(&spec.user, &paths));
        spec.annotations
            .insert(HOST_PATHS_ANNOTATION.into(), format!("{paths};{code}"));
    }
    let names = claims_of(t);
    if names.is_empty() {
        return Ok(());
    }
    let namespace = namespace_of(spec);
    for name in &names {
        let Some(claim) = objects
            .set()
            .claims
            .iter()
            .find(|c| c.namespace == namespace && &c.name == name)
        else {
            return Err(format!(
                "persistentvolumeclaim \"{name}\" not found in namespace {namespace} (apply it \
                 first, or in the same apply)"
            ));
        };
        let owner = claim.owner.as_deref().unwrap_or_default();
        if owner != spec.user {
            return Err(format!(
                "persistentvolumeclaim \"{name}\" in namespace {namespace} belongs to \
                 `{owner}`: a job of `{}` may not mount it (a claim's directory is its owner's \
                 alone)",
                spec.user
            ));
        }
    }
    spec.annotations
        .insert(CLAIMS_ANNOTATION.into(), names.join(","));
    Ok(())
}

/// What the controller seals of a job's node paths: the paths and the job's user.
fn host_paths_sealed(user: &str, paths: &str) -> String {
    format!("hostPaths of {user}: {paths}")
}

/// Puts in workload `t` the values of the Secrets it uses, from the controller's own
/// records: each must be applied in the workload's namespace (with the workload, whose
/// objects are applied first, or before it) and be the job's user's. What the submitter
/// sent as their values is replaced (a client that read a Secret applied before knows its
/// keys alone; no one else's values reach a job).
fn attach_secrets(
    objects: &QueueObjects,
    spec: &JobSpec,
    t: &mut cadre_k8s::Translated,
) -> Result<(), String> {
    let namespace = namespace_of(spec);
    for (name, data) in t.secrets.0.iter_mut() {
        let (Some(secret), Some(record)) = (
            objects
                .set()
                .secrets
                .iter()
                .find(|s| s.namespace == namespace && &s.name == name),
            objects
                .records()
                .iter()
                .find(|r| r.kind == "Secret" && r.namespace == namespace && &r.name == name),
        ) else {
            return Err(format!(
                "secret \"{name}\" not found in namespace {namespace} (apply it with the \
                 workload, or before it)"
            ));
        };
        let owner = owner_of(&record.manifest).unwrap_or_default();
        if owner != spec.user {
            return Err(format!(
                "secret \"{name}\" in namespace {namespace} belongs to `{owner}`: a job of `{}` \
                 may not use it",
                spec.user
            ));
        }
        data.clone_from(&secret.data);
    }
    Ok(())
}

/// The most bytes the workloads of one submission carry (their translations, with the
/// values of the Secrets the controller put in): a Secret applied once would otherwise be
/// copied into as many jobs as one request holds.
pub const MAX_CARRIED_BYTES: usize = 64 << 20;

/// Whether the workloads of one submission carry at most [`MAX_CARRIED_BYTES`].
pub fn check_carried(jobs: &[cadre_store::NewJob]) -> Result<(), String> {
    let mut total = 0usize;
    for j in jobs {
        if let Some(k) = &j.run.kubernetes {
            total = total.saturating_add(serde_json::to_string(k).map_or(0, |t| t.len()));
        }
    }
    if total > MAX_CARRIED_BYTES {
        return Err(format!(
            "the workloads of this submission carry {total} bytes (their Secrets' values \
             included), above {MAX_CARRIED_BYTES}: submit them in smaller requests"
        ));
    }
    Ok(())
}

/// The node paths a job mounts, as the controller recorded them in its annotation under
/// its seal (`key`: the cluster's key); nothing when the seal does not hold (a value a
/// submitter wrote there to an older controller, which did not clear it).
pub fn host_paths(spec: &JobSpec, key: &str) -> Vec<String> {
    let Some((paths, code)) = spec
        .annotations
        .get(HOST_PATHS_ANNOTATION)
        .and_then(|v| v.rsplit_once(';'))
    else {
        return Vec::new();
    };
    if !cadre_proto::job_token::sealed(key, &host_paths_sealed(&spec.user, paths), code) {
        return Vec::new();
    }
    paths
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The claims a job mounts, as its annotation records them.
fn claims_recorded(spec: &JobSpec) -> impl Iterator<Item = &str> {
    spec.annotations
        .get(CLAIMS_ANNOTATION)
        .map(String::as_str)
        .unwrap_or_default()
        .split(',')
        .filter(|n| !n.is_empty())
}

/// The namespace of a workload's job.
fn namespace_of(spec: &JobSpec) -> &str {
    spec.annotations
        .get("k8s.namespace")
        .map_or("default", String::as_str)
}

/// Whether a job not ended among `jobs` mounts claim `namespace/name`, as a message names
/// it (`job 12`).
pub fn claim_user<'a>(
    mut jobs: impl Iterator<Item = (u64, &'a JobSpec)>,
    namespace: &str,
    name: &str,
) -> Option<String> {
    jobs.find(|(_, spec)| {
        namespace_of(spec) == namespace && claims_recorded(spec).any(|c| c == name)
    })
    .map(|(id, _)| format!("job {id}"))
}

/// The claims of a launch order for a job: each recorded claim with its class's path and its
/// directory, from the objects applied now. A claim that is gone, or is no longer the job's
/// user's, is an error (the launch fails, saying which).
pub fn claim_mounts(objects: &QueueObjects, spec: &JobSpec) -> Result<Vec<ClaimMount>, String> {
    let set = objects.set();
    let namespace = namespace_of(spec);
    let mut out = Vec::new();
    for name in claims_recorded(spec) {
        let claim = set
            .claims
            .iter()
            .find(|c| c.namespace == namespace && c.name == name)
            .filter(|c| c.owner.as_deref() == Some(spec.user.as_str()))
            .ok_or_else(|| {
                format!("persistentvolumeclaim \"{name}\" in namespace {namespace} is not the job's user's")
            })?;
        let class = set
            .storage_classes
            .iter()
            .find(|s| Some(&s.name) == claim.class.as_ref())
            .ok_or_else(|| {
                format!("the StorageClass of persistentvolumeclaim \"{name}\" is gone")
            })?;
        let volume = claim
            .volume()
            .ok_or_else(|| format!("persistentvolumeclaim \"{name}\" has no uid"))?;
        out.push(ClaimMount {
            name: name.to_string(),
            class_path: class.path.clone(),
            volume,
            read_only: claim.read_only(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::Applier;
    use cadre_core::quota::QuotaConfig;
    use cadre_core::time::Time;

    fn json(yaml: &str) -> Vec<serde_json::Value> {
        cadre_k8s::documents_json(yaml, "test")
            .unwrap()
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    const CLASS: &str = "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: shared
  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}
provisioner: cadre.io/shared-directory
parameters: {path: /srv/claims}
";

    const CLAIM: &str = "apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  annotations: {cadre.io/owner: root}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
";

    fn by<'a>(user: &'a str, used: &'a dyn Fn(&str, &str) -> Option<String>) -> Applier<'a> {
        Applier {
            user,
            claim_user: used,
        }
    }

    /// The workload a Kubernetes manifest of one object becomes, submitted by `user` in
    /// namespace `ml`.
    fn translated(yaml: &str, user: &str) -> cadre_k8s::Translated {
        let o = cadre_k8s::parse_documents(yaml, "t").unwrap().remove(0);
        let opts = cadre_k8s::TranslateOptions::new(user, "ml", std::path::PathBuf::from("/"));
        cadre_k8s::translate(&o, &opts).unwrap()
    }

    fn unused(_: &str, _: &str) -> Option<String> {
        None
    }

    /// The class applied by root, then `CLAIM` by alice in namespace `ml`.
    fn applied() -> QueueObjects {
        let objects = QueueObjects::new(QuotaConfig::default());
        let objects = objects
            .change(&json(CLASS), &[], "ml", Time(1), &by("root", &unused))
            .unwrap()
            .next;
        objects
            .change(&json(CLAIM), &[], "ml", Time(2), &by("alice", &unused))
            .unwrap()
            .next
    }

    fn claim_ref() -> QueueObjectRef {
        QueueObjectRef {
            kind: "PersistentVolumeClaim".into(),
            namespace: "ml".into(),
            name: "data".into(),
        }
    }

    #[test]
    fn a_claim_gets_a_uid_its_applier_as_owner_and_the_default_class_and_keeps_them() {
        let objects = applied();
        let c = &objects.set().claims[0];
        assert_eq!(
            c.owner.as_deref(),
            Some("alice"),
            "the owner named is replaced"
        );
        assert_eq!(c.class.as_deref(), Some("shared"));
        let uid = c.uid.clone().unwrap();
        assert_eq!((uid.len(), uid.as_bytes()[14]), (36, b'4'), "{uid}");
        // The same manifest again: unchanged, the same uid.
        let again = objects
            .change(&json(CLAIM), &[], "ml", Time(3), &by("alice", &unused))
            .unwrap();
        assert_eq!(again.results[0].outcome, "unchanged");
        assert_eq!(again.next.set().claims[0].uid.as_ref(), Some(&uid));
        // Another claim gets another uid.
        let other = objects
            .change(
                &json(&CLAIM.replace("name: data", "name: more")),
                &[],
                "ml",
                Time(3),
                &by("alice", &unused),
            )
            .unwrap()
            .next;
        assert_ne!(other.set().claims[1].uid.as_ref(), Some(&uid));
        // Annotations given as null still get the owner.
        let null = CLAIM
            .replace("name: data", "name: bare")
            .replace("annotations: {cadre.io/owner: root}", "annotations: null");
        let bare = objects
            .change(&json(&null), &[], "ml", Time(4), &by("bob", &unused))
            .unwrap()
            .next;
        let c = bare.set().claims.iter().find(|c| c.name == "bare").unwrap();
        assert_eq!(c.owner.as_deref(), Some("bob"));
    }

    #[test]
    fn only_a_claim_s_owner_or_an_administrator_changes_it_and_users_apply_nothing_else() {
        let objects = applied();
        let forbidden_to = |user: &str, put: &[serde_json::Value], delete: &[QueueObjectRef]| {
            forbidden(&objects, put, delete, "ml", user, false)
        };
        assert_eq!(forbidden_to("alice", &json(CLAIM), &[]), None);
        assert_eq!(forbidden_to("alice", &[], &[claim_ref()]), None);
        let why = forbidden_to("bob", &json(CLAIM), &[]).unwrap();
        assert!(why.contains("belongs to `alice`"), "{why}");
        let why = forbidden_to("bob", &[], &[claim_ref()]).unwrap();
        assert!(why.contains("belongs to `alice`"), "{why}");
        let why = forbidden_to("bob", &json(CLASS), &[]).unwrap();
        assert!(
            why.contains(
                "only an administrator may apply or delete queue objects (here a StorageClass"
            ),
            "{why}"
        );
        assert_eq!(
            forbidden(&objects, &json(CLASS), &[claim_ref()], "ml", "root", true),
            None
        );
    }

    #[test]
    fn a_namespace_quota_counts_kept_objects_and_claims_storage_when_they_are_created() {
        let quota = "apiVersion: v1
kind: ResourceQuota
metadata: {name: q}
spec: {hard: {persistentvolumeclaims: 2, count/configmaps: 0, requests.storage: 3Gi}}
";
        let objects = applied()
            .change(&json(quota), &[], "ml", Time(3), &by("root", &unused))
            .unwrap()
            .next;
        let apply =
            |yaml: &str| objects.change(&json(yaml), &[], "ml", Time(4), &by("alice", &unused));
        let err = apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n")
            .unwrap_err();
        assert!(
            err.contains("exceeded quota: q, requested: configmaps=1, used: configmaps=0, limited: configmaps=0"),
            "{err}"
        );
        let err = apply(
            &CLAIM
                .replace("name: data", "name: big")
                .replace("1Gi", "3Gi"),
        )
        .unwrap_err();
        assert!(
            err.contains("exceeded quota: q, requested: requests.storage=3221225472, used: requests.storage=1073741824"),
            "{err}"
        );
        let two = apply(&CLAIM.replace("name: data", "name: two"))
            .unwrap()
            .next;
        let err = two
            .change(
                &json(&CLAIM.replace("name: data", "name: three")),
                &[],
                "ml",
                Time(5),
                &by("alice", &unused),
            )
            .unwrap_err();
        assert!(
            err.contains("requested: persistentvolumeclaims=1, used: persistentvolumeclaims=2, limited: persistentvolumeclaims=2"),
            "{err}"
        );
    }

    #[test]
    fn one_submission_carries_at_most_its_bound_of_workloads() {
        let job = |bytes: usize| {
            let mut run = RunSpec::command(vec!["true".into()], "/".into());
            run.kubernetes = Some(serde_json::Value::String("x".repeat(bytes)));
            cadre_store::NewJob {
                spec: JobSpec::simple(
                    "alice",
                    "ml",
                    1,
                    cadre_core::resources::TaskResources::default(),
                    cadre_core::time::Dur(60),
                ),
                run,
                partition: String::new(),
                array_of: None,
            }
        };
        let half = MAX_CARRIED_BYTES / 2;
        check_carried(&[job(half - 8), job(half - 8)]).unwrap();
        let err = check_carried(&[job(half), job(half)]).unwrap_err();
        assert!(
            err.contains("above 67108864: submit them in smaller requests"),
            "{err}"
        );
    }

    #[test]
    fn a_claim_in_use_and_the_class_of_a_claim_are_not_deleted() {
        let objects = applied();
        let used =
            |ns: &str, name: &str| (ns == "ml" && name == "data").then(|| "job 7".to_string());
        let err = objects
            .change(&[], &[claim_ref()], "ml", Time(3), &by("alice", &used))
            .unwrap_err();
        assert!(
            err.contains("is mounted by job 7, which has not ended"),
            "{err}"
        );
        let class = QueueObjectRef {
            kind: "StorageClass".into(),
            namespace: String::new(),
            name: "shared".into(),
        };
        let err = objects
            .change(
                &[],
                std::slice::from_ref(&class),
                "ml",
                Time(3),
                &by("root", &unused),
            )
            .unwrap_err();
        assert!(
            err.contains("is the class of PersistentVolumeClaims ml/data"),
            "{err}"
        );
        let gone = objects
            .change(
                &[],
                &[claim_ref(), class],
                "ml",
                Time(3),
                &by("root", &unused),
            )
            .unwrap();
        assert!(gone.next.set().claims.is_empty());
    }

    #[test]
    fn a_job_mounts_only_its_user_s_claims_of_its_namespace_as_the_controller_records_them() {
        let objects = applied();
        let workload = |user: &str, namespace: &str| {
            let yaml = format!(
                "apiVersion: batch/v1
kind: Job
metadata: {{name: train, namespace: {namespace}}}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes: [{{name: d, persistentVolumeClaim: {{claimName: data}}}}]
      containers:
      - name: c
        image: busybox
        command: ['true']
        volumeMounts: [{{name: d, mountPath: /data}}]
"
            );
            cadre_k8s::submission(&translated(&yaml, user)).unwrap()
        };
        let (mut spec, mut run) = workload("alice", "ml");
        spec.annotations
            .insert(CLAIMS_ANNOTATION.into(), "other".into());
        prepare_workload(&objects, &mut spec, &mut run, "k").unwrap();
        assert_eq!(
            spec.annotations[CLAIMS_ANNOTATION], "data",
            "the submitter's is replaced"
        );
        let uid = objects.set().claims[0].uid.clone().unwrap();
        assert_eq!(
            claim_mounts(&objects, &spec).unwrap(),
            [ClaimMount {
                name: "data".into(),
                class_path: "/srv/claims".into(),
                volume: format!("pvc-{uid}"),
                read_only: false,
            }]
        );
        assert_eq!(
            claim_user([(7, &spec)].into_iter(), "ml", "data").as_deref(),
            Some("job 7")
        );
        assert_eq!(claim_user([(7, &spec)].into_iter(), "team", "data"), None);
        let (mut spec, mut run) = workload("bob", "ml");
        let err = prepare_workload(&objects, &mut spec, &mut run, "k").unwrap_err();
        assert!(
            err.contains("belongs to `alice`: a job of `bob` may not mount it"),
            "{err}"
        );
        let (mut spec, mut run) = workload("alice", "team");
        let err = prepare_workload(&objects, &mut spec, &mut run, "k").unwrap_err();
        assert!(
            err.contains("persistentvolumeclaim \"data\" not found in namespace team"),
            "{err}"
        );
        // Node paths: sealed for the job's user; a value the controller did not seal, or
        // sealed for another user, gives none.
        let host = |user: &str| {
            let yaml = "apiVersion: batch/v1
kind: Job
metadata: {name: h, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes: [{name: d, hostPath: {path: /datasets}}]
      containers:
      - {name: c, image: busybox, command: ['true'], volumeMounts: [{name: d, mountPath: /data}]}
";
            cadre_k8s::submission(&translated(yaml, user)).unwrap()
        };
        let (mut spec, mut run) = host("root");
        prepare_workload(&objects, &mut spec, &mut run, "k").unwrap();
        assert_eq!(host_paths(&spec, "k"), ["/datasets"]);
        assert!(host_paths(&spec, "another key").is_empty());
        let mut forged = spec.clone();
        forged.user = "bob".into();
        assert!(
            host_paths(&forged, "k").is_empty(),
            "sealed for root, not bob"
        );
        forged
            .annotations
            .insert(HOST_PATHS_ANNOTATION.into(), "/etc".into());
        assert!(host_paths(&forged, "k").is_empty());
        // A Secret's values come from the controller's records, for its owner's jobs only.
        let secret =
            "apiVersion: v1\nkind: Secret\nmetadata: {name: hf}\nstringData: {token: real}\n";
        let with_secret = objects
            .change(&json(secret), &[], "ml", Time(5), &by("alice", &unused))
            .unwrap()
            .next;
        let uses = |user: &str| {
            let yaml = "apiVersion: batch/v1
kind: Job
metadata: {name: s, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
        command: ['true']
        env: [{name: T, valueFrom: {secretKeyRef: {name: hf, key: token}}}]
";
            let mut t = translated(yaml, user);
            // As a client sends it: the keys, and values of its own making.
            let forged: std::collections::BTreeMap<String, String> =
                [("token".to_string(), "Zm9yZ2Vk".to_string())].into();
            t.secrets.0.insert("hf".into(), forged);
            cadre_k8s::submission(&t).unwrap()
        };
        let (mut spec, mut run) = uses("alice");
        prepare_workload(&with_secret, &mut spec, &mut run, "k").unwrap();
        let t = cadre_k8s::workload_of(&run).unwrap().unwrap();
        assert_eq!(t.secrets.get("hf", "token").as_deref(), Some(&b"real"[..]));
        let (mut spec, mut run) = uses("bob");
        let err = prepare_workload(&with_secret, &mut spec, &mut run, "k").unwrap_err();
        assert!(
            err.contains("secret \"hf\" in namespace ml belongs to `alice`"),
            "{err}"
        );
        let err = prepare_workload(&objects, &mut spec, &mut run, "k").unwrap_err();
        assert!(
            err.contains("secret \"hf\" not found in namespace ml"),
            "{err}"
        );
        // A job whose annotation was not the controller's gets no mount of another's claim.
        let (mut spec, _) = workload("bob", "ml");
        spec.annotations
            .insert(CLAIMS_ANNOTATION.into(), "data".into());
        assert!(claim_mounts(&objects, &spec).is_err());
    }
}
