//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1),
//! served and enforced as a Kubernetes 1.30+ API server does: a create or an update (a patch, a
//! server-side apply, a write of the `scale` subresource) of a resource a policy's
//! `matchConstraints` and a binding's `matchResources` select is checked against the policy's
//! CEL `matchConditions` and `validations`; the binding's `validationActions` decide whether a
//! failed validation denies the request (`Deny`: the reason's code, 422 Invalid by default, with
//! the message `ValidatingAdmissionPolicy 'P' with binding 'B' denied request: ...`), adds a
//! `Warning` header (`Warn`) or is only audited (`Audit`, which the sandbox records nowhere).
//!
//! `kinds` are the two resources, `check` their validation and defaults, `attributes` what a
//! decision reads, `matching` which requests a policy and a binding select, `cel` the CEL
//! environment (through `cel-interpreter`), `dispatch` the decision, `request` the request a
//! handler serves. Requests made through the HTTP API are admitted; the sandbox's own
//! controllers and kubelet write the store directly and are not (their Kubernetes counterparts
//! are other users, whom a policy names by `request.userInfo`).
//! Not served: `paramKind` (a policy with one is refused at creation, naming the field),
//! `auditAnnotations` (accepted, not evaluated), the `authorizer` variable, DELETE and CONNECT
//! operations (never matched: the sandbox admits writes of objects only).

mod attributes;
pub(crate) mod cel;
mod check;
mod dispatch;
mod kinds;
mod matching;
mod request;
#[cfg(test)]
mod tests;

pub use attributes::{Attributes, Policies};
pub use check::{defaults, validate};
pub use dispatch::admit;
pub use kinds::{KINDS, VALIDATINGADMISSIONPOLICIES, VALIDATINGADMISSIONPOLICYBINDINGS};
pub use request::{as_server, current, during, warn, UserInfo};
