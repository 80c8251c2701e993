//! Elastic jobs (`--elastic --max-pods M`): what the Role grants, the workload's annotations,
//! and the options refused.

use super::error::ManifestError;
use super::meta::MAX_PODS_ANNOTATION;
use super::options::ManifestArgs;
use super::render;
use crate::workload::KUEUE_ELASTIC_ANNOTATION;
use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser)]
struct T {
    #[command(flatten)]
    a: ManifestArgs,
}

fn objects(v: &[&str]) -> Result<Vec<Value>, ManifestError> {
    let mut argv = vec!["manifest"];
    argv.extend(v);
    let a = T::try_parse_from(argv).unwrap().a;
    render::objects(&a.plan()?, None)
}

fn of_kind<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter().find(|o| o["kind"] == kind).unwrap()
}

#[test]
fn an_elastic_job_may_patch_itself_and_says_so() {
    let objs = objects(&[
        "--name",
        "el",
        "--pods",
        "4",
        "--elastic",
        "--max-pods",
        "8",
    ])
    .unwrap();
    let rules = &of_kind(&objs, "Role")["rules"];
    assert_eq!(
        rules[1],
        json!({"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": ["el"], "verbs": ["get", "patch"]})
    );
    // Nothing else gained a write verb.
    assert_eq!(rules[0]["verbs"], json!(["get", "list", "watch"]));
    assert_eq!(rules.as_array().unwrap().len(), 2);
    let job = of_kind(&objs, "Job");
    assert_eq!(
        job["metadata"]["annotations"][KUEUE_ELASTIC_ANNOTATION],
        "true"
    );
    assert_eq!(job["metadata"]["annotations"][MAX_PODS_ANNOTATION], "8");
    assert_eq!(job["spec"]["parallelism"], 4);
    assert_eq!(job["spec"]["completions"], 4);
}

#[test]
fn an_elastic_statefulset_may_patch_itself_and_its_scale() {
    let objs = objects(&[
        "--name",
        "s",
        "--kind",
        "statefulset",
        "--pods",
        "2",
        "--elastic",
        "--max-pods",
        "3",
    ])
    .unwrap();
    assert_eq!(
        of_kind(&objs, "Role")["rules"][1],
        json!({"apiGroups": ["apps"], "resources": ["statefulsets", "statefulsets/scale"], "resourceNames": ["s"], "verbs": ["get", "patch"]})
    );
    let sts = of_kind(&objs, "StatefulSet");
    assert_eq!(sts["metadata"]["annotations"][MAX_PODS_ANNOTATION], "3");
    // Kueue's annotation is for Jobs.
    assert!(sts["metadata"]["annotations"]
        .get(KUEUE_ELASTIC_ANNOTATION)
        .is_none());
}

#[test]
fn a_job_not_elastic_only_reads_itself() {
    let objs = objects(&["--name", "fixed", "--pods", "4"]).unwrap();
    assert_eq!(of_kind(&objs, "Role")["rules"][1]["verbs"], json!(["get"]));
    let job = of_kind(&objs, "Job");
    assert!(job["metadata"].get("annotations").is_none(), "{job}");
}

#[test]
fn elastic_options_are_checked() {
    let e = objects(&["--pods", "4", "--elastic", "--max-pods", "3"]).unwrap_err();
    assert!(
        matches!(e, ManifestError::MaxPods { max: 3, pods: 4 }),
        "{e}"
    );
    assert!(e.to_string().contains("--max-pods 3 is below --pods 4"));
    let e = objects(&["--kind", "jobset", "--elastic", "--max-pods", "3"]).unwrap_err();
    assert!(matches!(e, ManifestError::ElasticJobset), "{e}");
    // Each needs the other.
    for argv in [
        &["manifest", "--elastic"][..],
        &["manifest", "--max-pods", "4"],
    ] {
        let e = T::try_parse_from(argv).err().expect("refused");
        assert_eq!(
            e.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{e}"
        );
    }
}
