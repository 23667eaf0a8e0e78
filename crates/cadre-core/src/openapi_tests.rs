//! The OpenAPI schemas (feature `openapi`) of the types the REST API carries honour their
//! serde shapes: field names, renames, defaults, transparent newtypes.

use serde_json::Value;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(components(schemas(
    crate::job::JobSpec,
    crate::job::JobState,
    crate::run::RunSpec,
    crate::alloc::Allocation,
    crate::cluster::NodeAvail,
    crate::cluster::NodeState,
    crate::scheduler::PendingReason,
    crate::resources::Amounts,
)))]
struct Api;

fn schemas() -> Value {
    let doc = serde_json::to_value(Api::openapi()).expect("the document serializes");
    doc["components"]["schemas"].clone()
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn job_spec_schema_has_serde_field_names_and_requires_only_fields_without_defaults() {
    let s = schemas();
    let spec = &s["JobSpec"];
    assert_eq!(
        strings(&spec["required"]),
        [
            "name",
            "user",
            "account",
            "time_limit",
            "submit_time",
            "groups"
        ]
    );
    assert_eq!(spec["additionalProperties"], false, "deny_unknown_fields");
    // Every key serde writes is a property of the schema, and no other.
    let mut sample = crate::job::JobSpec::simple(
        "u",
        "a",
        1,
        crate::resources::TaskResources::default(),
        crate::time::Dur(60),
    );
    // Left out of the JSON when empty.
    sample
        .annotations
        .insert("slurm.comment".into(), "x".into());
    sample.namespace = Some("team".into());
    let written = serde_json::to_value(&sample).expect("a spec serializes");
    let mut keys: Vec<&String> = written.as_object().expect("an object").keys().collect();
    let mut props: Vec<&String> = spec["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .collect();
    keys.sort();
    props.sort();
    assert_eq!(keys, props);
    // Transparent newtypes are their number; pairs are two-item arrays.
    assert_eq!(s["JobId"]["type"], "integer");
    assert_eq!(s["Dur"]["type"], "integer");
    let pair = &spec["properties"]["node_selector"]["items"];
    assert_eq!(pair["prefixItems"].as_array().map(Vec::len), Some(2));
}

#[test]
fn enum_schemas_use_the_serde_renames() {
    let s = schemas();
    assert!(strings(&s["JobState"]["enum"]).contains(&"NODE_FAIL"));
    assert_eq!(
        strings(&s["NodeAvail"]["enum"]),
        ["up", "drain", "down", "unknown"]
    );
    let span = s["NetworkSpan"]["oneOf"].to_string();
    assert!(
        span.contains("\"one_leaf\"") && span.contains("\"max_switches\""),
        "{span}"
    );
    let dep = s["Dependency"]["oneOf"].to_string();
    assert!(
        dep.contains("\"on\"") && dep.contains("\"singleton\""),
        "{dep}"
    );
    assert!(strings(&s["RequeuePolicy"]["enum"]).contains(&"never"));
}

#[test]
fn run_spec_paths_are_strings() {
    let s = schemas();
    let run = &s["RunSpec"];
    assert_eq!(strings(&run["required"]), ["work_dir"]);
    assert_eq!(run["properties"]["work_dir"]["type"], "string");
    assert_eq!(
        run["properties"]["submit_dir"]["type"],
        serde_json::json!(["string", "null"])
    );
}
