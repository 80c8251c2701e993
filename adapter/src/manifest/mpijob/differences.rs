//! The fields of the Launcher's pod that pod 0 does not get when one Indexed Job's pod
//! template (the Worker's) makes every pod, each named in a note.

use serde_json::Value;

use super::container::{first_container, REPLACED};
use super::error::{MpiJobError, Note};
use super::parse::Replica;
use super::reader::show;

/// `...template.spec` → `...template`.
fn template_of(spec_path: &str) -> &str {
    spec_path.strip_suffix(".spec").unwrap_or(spec_path)
}

/// Notes every field of the Launcher's pod (besides its command, and the environment,
/// volumes and mounts it adds) that pod 0 does not get because it differs from the Worker's.
pub(super) fn launcher_differences(
    l: &Replica,
    w: &Replica,
    notes: &mut Vec<Note>,
) -> Result<(), MpiJobError> {
    let why = "one Indexed Job has one pod template; in a JobSet the launcher has its own pod";
    let mut differ = |field: String, a: Option<&Value>, b: Option<&Value>| {
        if a == b {
            return;
        }
        let worker = b.map(show).unwrap_or_else(|| "none".into());
        let what = match a {
            None => format!("unset, so pod 0 (the launcher) gets the Worker's {worker} ({why})"),
            Some(a) => format!(
                "{} not used: pod 0 (the launcher) gets the Worker's {worker} ({why})",
                show(a)
            ),
        };
        notes.push(Note::launcher_lost(field, what));
    };
    let lc = first_container(l)?;
    let wc = first_container(w)?;
    // What the agent's parts replace is not compared, but for the security context: the
    // Worker's is made restricted, and a Launcher's that differs is named.
    let ignored = |k: &str| k != "securityContext" && REPLACED.contains(&k);
    let mut keys: Vec<&String> = lc
        .keys()
        .chain(wc.keys())
        .filter(|k| !ignored(k.as_str()))
        .collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        differ(
            format!("{}.containers[0].{k}", l.path),
            lc.get(k),
            wc.get(k),
        );
    }
    let skip = [
        "containers",
        "volumes",
        "restartPolicy",
        "hostname",
        "subdomain",
    ];
    let mut keys: Vec<&String> = l
        .spec
        .keys()
        .chain(w.spec.keys())
        .filter(|k| !skip.contains(&k.as_str()))
        .collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        differ(format!("{}.{k}", l.path), l.spec.get(k), w.spec.get(k));
    }
    for (what, lm, wm) in [
        ("labels", &l.labels, &w.labels),
        ("annotations", &l.annotations, &w.annotations),
    ] {
        for (k, v) in lm {
            if wm.get(k) != Some(v) {
                differ(
                    format!("{}.metadata.{what}[{k}]", template_of(&l.path)),
                    Some(v),
                    wm.get(k),
                );
            }
        }
    }
    if let Some(Value::Array(cs)) = l.spec.get("containers") {
        for (i, c) in cs.iter().enumerate().skip(1) {
            notes.push(Note::launcher_lost(
                format!("{}.containers[{i}]", l.path),
                format!(
                    "{} not used: pod 0 (the launcher) runs the Worker's containers ({why})",
                    show(&c["name"])
                ),
            ));
        }
    }
    Ok(())
}
