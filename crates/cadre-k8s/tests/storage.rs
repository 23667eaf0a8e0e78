//! StorageClasses and PersistentVolumeClaims read as Kubernetes reads them, and a pod's
//! `persistentVolumeClaim` volume translated (see `cadre_k8s::storage`).

use cadre_k8s::storage::{ClaimConfig, Provisioning, claim_update, claims_of, class_update};
use cadre_k8s::{QueueSet, TranslateOptions, VolumeKind, parse_documents, translate};

fn set(yaml: &str) -> Result<QueueSet, String> {
    let mut set = QueueSet::default();
    for o in parse_documents(yaml, "test").map_err(|e| e.to_string())? {
        set.apply_in(&o, "ml").map_err(|e| e.to_string())?;
    }
    Ok(set)
}

const CLASS: &str = "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: shared
  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}
provisioner: cadre.io/shared-directory
parameters: {path: /srv/claims}
volumeBindingMode: WaitForFirstConsumer
";

const CLAIM: &str = "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Gi}}
";

fn claim(yaml: &str) -> ClaimConfig {
    set(yaml).unwrap().claims.remove(0)
}

#[test]
fn a_class_is_a_directory_of_one_of_cadre_s_provisioners() {
    let s = set(CLASS).unwrap();
    let c = &s.storage_classes[0];
    assert_eq!(c.provisioning, Provisioning::Shared);
    assert_eq!(c.path, "/srv/claims");
    assert_eq!(
        s.default_storage_class().map(|c| c.name.as_str()),
        Some("shared")
    );
    let local = set(&CLASS
        .replace("cadre.io/shared-directory", "cadre.io/node-local")
        .replace("\"true\"", "\"false\""))
    .unwrap();
    assert_eq!(
        local.storage_classes[0].provisioning,
        Provisioning::NodeLocal
    );
    assert!(local.default_storage_class().is_none());
    let err = set("apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
provisioner: ebs.csi.aws.com
parameters: {type: gp3, path: /proc/x}
reclaimPolicy: Delete
mountOptions: [noatime]
")
    .unwrap_err();
    for words in [
        "provisioner: `ebs.csi.aws.com` is not one of cadre's",
        "parameters.type: not a parameter of cadre's provisioners",
        "parameters.path: `/proc/x`",
        "reclaimPolicy: `Delete` is not supported",
        "mountOptions: not supported",
    ] {
        assert!(err.contains(words), "{words}: {err}");
    }
    let err = set(&format!(
        "{CLASS}---\n{}",
        CLASS.replace("name: shared", "name: other")
    ))
    .unwrap_err();
    assert!(
        err.contains("StorageClass shared is already the default"),
        "{err}"
    );
    for path in ["relative", "/", "/a/../etc", "/a b"] {
        let err = set(&CLASS.replace("/srv/claims", path)).unwrap_err();
        assert!(err.contains("parameters.path"), "{path}: {err}");
    }
}

#[test]
fn a_claim_is_read_with_kubernetes_checks_and_refuses_what_a_directory_cannot_be() {
    let c = claim(CLAIM);
    assert_eq!((c.namespace.as_str(), c.name.as_str()), ("ml", "data"));
    assert_eq!(c.class, None, "the controller gives it the default class");
    assert_eq!(c.storage.as_ref().map(|s| s.text.as_str()), Some("10Gi"));
    assert!(!c.read_only());
    assert!(claim(&CLAIM.replace("ReadWriteOnce", "ReadOnlyMany")).read_only());
    let err = set("apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: bad}
spec:
  storageClassName: ''
  accessModes: [ReadWriteOncePod, ReadWriteMany, Sometimes]
  volumeMode: Block
  volumeName: pv-1
  selector: {matchLabels: {a: b}}
  resources: {requests: {cpu: 1}}
")
    .unwrap_err();
    for words in [
        "spec.storageClassName: `\"\"` asks for a PersistentVolume made beforehand",
        "Unsupported value: \"Sometimes\"",
        "may not use ReadWriteOncePod with other access modes",
        "spec.volumeMode: `Block` is not supported",
        "spec.volumeName: not supported",
        "spec.selector: not supported",
        "spec.resources[storage]: Required value",
        "spec.resources.requests.cpu: a claim requests `storage` only",
    ] {
        assert!(err.contains(words), "{words}: {err}");
    }
    let err = set(&CLAIM.replace("name: data", "name: 'a,victim'")).unwrap_err();
    assert!(err.contains("a lowercase RFC 1123 subdomain"), "{err}");
    let err = set("apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: empty}
spec: {resources: {requests: {storage: 0}}}
")
    .unwrap_err();
    assert!(err.contains("at least 1 access mode is required"), "{err}");
    assert!(err.contains("must be greater than zero"), "{err}");
}

#[test]
fn a_claim_s_class_must_be_applied_and_only_its_request_may_grow() {
    let s = set(&format!("{CLASS}---\n{CLAIM}")).unwrap();
    let err = s.check_references().unwrap_err().to_string();
    assert!(err.contains("names no storageClassName"), "{err}");
    let named = CLAIM.replace("spec:\n", "spec:\n  storageClassName: shared\n");
    set(&format!("{CLASS}---\n{named}"))
        .unwrap()
        .check_references()
        .unwrap();
    let err = set(&named.replace("shared", "fast"))
        .unwrap()
        .check_references()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("storageclass.storage.k8s.io \"fast\" not found"),
        "{err}"
    );
    let class = set(CLASS).unwrap().storage_classes.remove(0);
    let old = claim(&named);
    let grown = claim(&named.replace("10Gi", "20Gi"));
    let err = claim_update(&old, &grown, Some(&class)).unwrap_err();
    assert!(err.contains("must support resize"), "{err}");
    let expanding = set(&CLASS.replace(
        "volumeBindingMode",
        "allowVolumeExpansion: true\nvolumeBindingMode",
    ))
    .unwrap()
    .storage_classes
    .remove(0);
    claim_update(&old, &grown, Some(&expanding)).unwrap();
    let err = claim_update(&grown, &old, Some(&expanding)).unwrap_err();
    assert!(
        err.contains("field can not be less than status.capacity"),
        "{err}"
    );
    let err = claim_update(
        &old,
        &claim(&named.replace("ReadWriteOnce", "ReadWriteMany")),
        Some(&class),
    )
    .unwrap_err();
    assert!(err.contains("spec is immutable after creation"), "{err}");
    let moved = set(&CLASS.replace("/srv/claims", "/srv/other"))
        .unwrap()
        .storage_classes
        .remove(0);
    let err = class_update(&class, &moved).unwrap_err();
    assert!(err.contains("updates to parameters are forbidden"), "{err}");
}

#[test]
fn a_pod_s_claim_volume_is_mounted_read_only_where_the_volume_or_the_mount_says() {
    let yaml = "apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes:
      - {name: data, persistentVolumeClaim: {claimName: datasets, readOnly: true}}
      - {name: out, persistentVolumeClaim: {claimName: results}}
      containers:
      - name: c
        image: busybox
        command: ['true']
        volumeMounts:
        - {name: data, mountPath: /data}
        - {name: out, mountPath: /out}
        - {name: out, mountPath: /peek, readOnly: true}
";
    let nested = yaml.replace("mountPath: /peek", "mountPath: /out/peek");
    let objects = parse_documents(&nested, "t.yaml").unwrap();
    let err = translate(
        &objects[0],
        &TranslateOptions::new("alice", "ml", std::path::PathBuf::from("/home/alice")),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`/out/peek` and `/out` are one inside the other: nested volume mounts"),
        "{err}"
    );
    let bad = yaml.replace("claimName: results", "claimName: 'a,b'");
    let objects = parse_documents(&bad, "t.yaml").unwrap();
    let err = translate(
        &objects[0],
        &TranslateOptions::new("alice", "ml", std::path::PathBuf::from("/home/alice")),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("`a,b`: a claim's name"), "{err}");
    let objects = parse_documents(yaml, "t.yaml").unwrap();
    let t = translate(
        &objects[0],
        &TranslateOptions::new("alice", "ml", std::path::PathBuf::from("/home/alice")),
    )
    .unwrap();
    let kinds: Vec<(&str, &VolumeKind)> = t.groups[0]
        .volumes
        .iter()
        .map(|v| (v.path.as_str(), &v.kind))
        .collect();
    let claim = |name: &str, read_only: bool| VolumeKind::Claim {
        claim: name.into(),
        read_only,
    };
    assert_eq!(
        kinds,
        [
            ("/data", &claim("datasets", true)),
            ("/out", &claim("results", false)),
            ("/peek", &claim("results", true)),
        ]
    );
    assert_eq!(claims_of(&t), ["datasets", "results"]);
}

#[test]
fn a_host_path_is_read_with_its_type_and_devices_and_odd_paths_are_refused() {
    let job = |volume: &str| {
        format!(
            "apiVersion: batch/v1
kind: Job
metadata: {{name: train}}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes: [{volume}]
      containers:
      - name: c
        image: busybox
        command: ['true']
        volumeMounts: [{{name: h, mountPath: /data, readOnly: true}}]
"
        )
    };
    let opts = TranslateOptions::new("root", "root", std::path::PathBuf::from("/"));
    let read = |volume: &str| {
        let objects = parse_documents(&job(volume), "t.yaml").unwrap();
        translate(&objects[0], &opts).map_err(|e| e.to_string())
    };
    let t = read("{name: h, hostPath: {path: /datasets/, type: DirectoryOrCreate}}").unwrap();
    assert_eq!(
        t.groups[0].volumes[0].kind,
        VolumeKind::HostPath {
            path: "/datasets".into(),
            kind: Some(cadre_k8s::HostPathKind::DirectoryOrCreate),
            read_only: true,
        }
    );
    assert_eq!(cadre_k8s::storage::host_paths_of(&t), ["/datasets"]);
    for (volume, words) in [
        (
            "{name: h, hostPath: {path: /dev/infiniband, type: CharDevice}}",
            "`CharDevice` is not supported",
        ),
        (
            "{name: h, hostPath: {path: data}}",
            "`data`: an absolute path",
        ),
        (
            "{name: h, hostPath: {path: /a/../etc}}",
            "without `.` or `..`",
        ),
        (
            "{name: h, hostPath: {path: '/a:b'}}",
            "an absolute path of letters",
        ),
        ("{name: h, hostPath: {path: /}}", "and not `/`"),
    ] {
        let err = read(volume).unwrap_err();
        assert!(err.contains(words), "{volume}: {err}");
    }
}

#[test]
fn a_secret_above_kubernetes_bound_is_refused() {
    let big = "x".repeat(cadre_k8s::config::MAX_SECRET_BYTES + 1);
    let yaml = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: big}}\nstringData: {{a: {big}}}\n"
    );
    let err = set(&yaml).unwrap_err();
    assert!(
        err.contains("Too long: must have at most 1048576 bytes"),
        "{}",
        &err[..200.min(err.len())]
    );
    set("apiVersion: v1\nkind: Secret\nmetadata: {name: small}\nstringData: {a: b}\n").unwrap();
}
