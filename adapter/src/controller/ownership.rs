//! Whose an object of a job's name is, read from its metadata alone (pure): the MPIJob's own
//! ([`owned`]: it controls it, and `prrte-k8s manifest` did not print it), one that goes by
//! itself ([`passing`]: being deleted, or an earlier MPIJob's of the same name, which the
//! garbage collector deletes), or another's, which the controller never takes over: the
//! MPIJob then fails naming it ([`not_managed`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::manifest::mpijob::model::MpiJob;
use crate::manifest::RENDERED_BY;
use kube::Resource;

/// Whether the object of `meta` is printed by `prrte-k8s manifest` (it carries
/// [`RENDERED_BY`]): made by hand, whatever its ownerReferences say.
pub(crate) fn rendered(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(RENDERED_BY))
}

/// Whether the object of `meta` is the MPIJob `uid`'s own: controlled by it, and not printed by
/// `prrte-k8s manifest` (someone who adds an ownerReference to a rendered object does not make
/// it the controller's).
pub(crate) fn owned(meta: &ObjectMeta, uid: &str) -> bool {
    !rendered(meta)
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Whether the object of `meta`, not the MPIJob `name`'s own, goes by itself: it is being
/// deleted, or an earlier MPIJob of the same name controls it (deleted, and the garbage
/// collector not yet done with its objects). Then the MPIJob waits for it.
pub(crate) fn passing(meta: &ObjectMeta, name: &str) -> bool {
    if meta.deletion_timestamp.is_some() {
        return true;
    }
    !rendered(meta)
        && meta.owner_references.iter().flatten().any(|r| {
            r.controller == Some(true)
                && r.kind == MpiJob::kind(&())
                && r.api_version == MpiJob::api_version(&())
                && r.name == name
        })
}

/// Why the MPIJob `job` (`namespace/name`) cannot run beside the `kind` `at` (`namespace/name`),
/// which is not its own, and what to do (mpi-operator's event says "Resource %q already exists
/// and is not managed by MPIJob").
pub(crate) fn not_managed(kind: &str, at: &str, meta: &ObjectMeta, job: &str) -> String {
    let whose = if rendered(meta) {
        format!(" (printed by `prrte-k8s manifest`: its annotation {RENDERED_BY})")
    } else {
        match meta
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
        {
            Some(r) => format!(" (controlled by the {} {})", r.kind, r.name),
            None => String::new(),
        }
    };
    format!(
        "the {kind} {at} already exists and is not managed by MPIJob {job}{whose}; nothing was made. \
         Delete the {kind} (if it is no longer used) or give the MPIJob another name, then create the MPIJob again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn meta(owner: Option<(&str, &str, &str)>, annotated: bool) -> ObjectMeta {
        ObjectMeta {
            owner_references: owner.map(|(kind, name, uid)| {
                vec![OwnerReference {
                    api_version: if kind == "MPIJob" {
                        "kubeflow.org/v2beta1".into()
                    } else {
                        "apps/v1".into()
                    },
                    kind: kind.into(),
                    name: name.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            annotations: annotated
                .then(|| [(RENDERED_BY.to_string(), "prrte-k8s-manifest".to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_rendered_object_is_never_the_mpijobs_even_with_its_owner_reference() {
        let mine = meta(Some(("MPIJob", "victim", "u1")), false);
        assert!(owned(&mine, "u1"));
        assert!(!owned(&mine, "u2"));
        let forged = meta(Some(("MPIJob", "victim", "u1")), true);
        assert!(!owned(&forged, "u1"));
        // Nor does it pass as an earlier MPIJob's: it does not go by itself.
        assert!(!passing(&forged, "victim"));
        let m = not_managed("Secret", "team/victim-prrte", &forged, "team/victim");
        assert!(m.contains("the Secret team/victim-prrte already exists and is not managed by MPIJob team/victim"), "{m}");
        assert!(
            m.contains(RENDERED_BY) && m.contains("Delete the Secret"),
            "{m}"
        );
    }

    #[test]
    fn an_earlier_mpijobs_or_a_deleted_object_passes_anothers_does_not() {
        assert!(passing(
            &meta(Some(("MPIJob", "victim", "old")), false),
            "victim"
        ));
        assert!(!passing(
            &meta(Some(("MPIJob", "other", "old")), false),
            "victim"
        ));
        assert!(!passing(
            &meta(Some(("StatefulSet", "victim", "s")), false),
            "victim"
        ));
        assert!(!passing(&meta(None, false), "victim"));
        let mut going = meta(None, true);
        going.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(passing(&going, "victim"));
        let m = not_managed(
            "Job",
            "team/victim",
            &meta(Some(("StatefulSet", "victim", "s")), false),
            "team/victim",
        );
        assert!(m.contains("(controlled by the StatefulSet victim)"), "{m}");
    }
}
