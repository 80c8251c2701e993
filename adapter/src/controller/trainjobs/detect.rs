//! Whether Trainer's controller is installed: a ValidatingWebhookConfiguration with Trainer's
//! TrainJob webhook (`validator.trainjob.trainer.kubeflow.org`, which its manager serves and
//! every install of it has). Needs `list` on validatingwebhookconfigurations; a cluster that
//! does not serve them has no webhook.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// The webhook Trainer's controller serves for TrainJobs.
pub(crate) const TRAINER_WEBHOOK: &str = "validator.trainjob.trainer.kubeflow.org";

/// Why `--trainjobs` does not start.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("--trainjobs: Kubeflow Trainer's controller is installed (the ValidatingWebhookConfiguration {0} has its webhook {TRAINER_WEBHOOK}); it reconciles every TrainJob already: run the controller without --trainjobs, or uninstall Trainer's controller (keeping its CRDs) to have prrte-k8s reconcile the TrainJobs")]
    TrainerInstalled(String),
    #[error("--trainjobs: cannot tell whether Kubeflow Trainer's controller is installed: {0} (the controller's ClusterRole must allow list on validatingwebhookconfigurations.admissionregistration.k8s.io)")]
    Check(#[source] kube::Error),
}

/// The name of the configuration that has `webhook` among its webhooks, if any.
pub(crate) fn holder<'a>(
    configs: &'a [ValidatingWebhookConfiguration],
    webhook: &str,
) -> Option<&'a ValidatingWebhookConfiguration> {
    configs
        .iter()
        .find(|c| c.webhooks.iter().flatten().any(|w| w.name == webhook))
}

/// Refuses when Trainer's controller is installed.
pub async fn refuse_if_trainer(client: &Client) -> Result<(), DetectError> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let list = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(DetectError::Check(e)),
    };
    match holder(&list, TRAINER_WEBHOOK) {
        Some(c) => Err(DetectError::TrainerInstalled(c.name_any())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn trainers_webhook_is_found_whatever_its_configuration_is_called() {
        let configs: Vec<ValidatingWebhookConfiguration> = serde_json::from_value(json!([
            {"metadata": {"name": "other"}, "webhooks": [{"name": "v.example.org",
                "clientConfig": {}, "sideEffects": "None", "admissionReviewVersions": ["v1"]}]},
            {"metadata": {"name": "kubeflow-trainer-validating-webhook-configuration"}, "webhooks": [
                {"name": TRAINER_WEBHOOK, "clientConfig": {}, "sideEffects": "None", "admissionReviewVersions": ["v1"]}]},
        ]))
        .unwrap();
        assert_eq!(
            holder(&configs, TRAINER_WEBHOOK)
                .map(|c| c.name_any())
                .as_deref(),
            Some("kubeflow-trainer-validating-webhook-configuration")
        );
        assert!(holder(&configs[..1], TRAINER_WEBHOOK).is_none());
        let e = DetectError::TrainerInstalled("x".into()).to_string();
        assert!(
            e.contains("without --trainjobs") && e.contains("uninstall"),
            "{e}"
        );
    }
}
