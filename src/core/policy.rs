//! edgegate's rules as a ValidatingAdmissionPolicy and its binding (`edgegate policy`,
//! deploy/components/policy): the API server judges copies in-process, with the namespace's
//! EdgeReachability `default` as the parameter, instead of calling the webhook.
//!
//! The same table as the webhook's, with one difference: CEL compares addresses as exact strings,
//! where the webhook compares normalised addresses. A record that spells an address differently
//! from its copy (`FD20::1` for `fd20::1`) would see that copy refused, so this mode is only
//! right for a hub whose records and copies are all spelled canonically, which `edgegate audit`
//! checks and the pruner keeps watching (`--exact-spelling`).
//!
//! - no record: `parameterNotFoundAction: Allow` (silence is not withdrawal);
//! - a copy that carries no address, an UPDATE of a copy that adds no address, an UPDATE that
//!   makes it no copy, the last finalizer leaving a terminating copy: not evaluated (the match
//!   conditions: the webhook's own two, and two for what the webhook decides itself);
//! - otherwise admitted when the record names one of its addresses, refused naming the namespace
//!   and the addresses (an empty record names none).

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ParamKind, ParamRef, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};

use super::selector::DEFAULT_COPY_SELECTOR;

/// The name of the policy and of its binding.
pub const NAME: &str = "edgegate";

/// What the emergency-off command deletes by (docs/deploy.md), as on the webhook configurations.
const ENFORCES: (&str, &str) = ("edgegate.datumapis.com/enforces", "true");

/// The copy label's key and value.
fn copy_label() -> (&'static str, &'static str) {
    DEFAULT_COPY_SELECTOR.split_once('=').unwrap_or((DEFAULT_COPY_SELECTOR, "true"))
}

/// The webhook configuration's match conditions: the API server skips what cannot be refused. A
/// stored slice without endpoints has `endpoints: null`, not absent: every use checks for both,
/// since a condition that errors would fall back to the failure policy and refuse the write.
pub fn webhook_match_conditions() -> Vec<MatchCondition> {
    let (key, value) = copy_label();
    vec![
        MatchCondition {
            name: "carries-an-address".into(),
            expression: "has(object.endpoints) && object.endpoints != null && \
                object.endpoints.exists(e, has(e.addresses) && e.addresses != null && size(e.addresses) > 0)"
                .into(),
        },
        MatchCondition {
            name: "adds-an-address-or-becomes-a-copy".into(),
            expression: format!(
                "request.operation != 'UPDATE' || \
                 !(has(oldObject.metadata.labels) && '{key}' in oldObject.metadata.labels && \
                   oldObject.metadata.labels['{key}'] == '{value}') || \
                 (has(object.endpoints) && object.endpoints != null && \
                  object.endpoints.exists(e, has(e.addresses) && e.addresses != null && e.addresses.exists(a, \
                    !(has(oldObject.endpoints) && oldObject.endpoints != null && \
                      oldObject.endpoints.exists(o, has(o.addresses) && o.addresses != null && a in o.addresses)))))"
            ),
        },
    ]
}

/// The policy's match conditions: the webhook's; an UPDATE that makes the slice no copy (the
/// objectSelector matches an UPDATE if the old object matched; the webhook lets what is no copy
/// pass); and the last finalizer leaving a terminating copy (the API server deletes it with that
/// UPDATE, whatever else the UPDATE says).
fn policy_match_conditions() -> Vec<MatchCondition> {
    let (key, value) = copy_label();
    let mut conditions = webhook_match_conditions();
    conditions.push(MatchCondition {
        name: "still-a-copy".into(),
        expression: format!(
            "has(object.metadata.labels) && '{key}' in object.metadata.labels && \
             object.metadata.labels['{key}'] == '{value}'"
        ),
    });
    conditions.push(MatchCondition {
        name: "not-the-last-finalizer-leaving".into(),
        expression: "request.operation != 'UPDATE' || !has(object.metadata.deletionTimestamp) || \
            (has(object.metadata.finalizers) && size(object.metadata.finalizers) > 0)"
            .into(),
    });
    conditions
}

/// Admitted when the record names one of the copy's addresses, as exact strings.
const NAMED: &str = "has(params.spec) && has(params.spec.addresses) && params.spec.addresses != null && \
    object.endpoints.exists(e, has(e.addresses) && e.addresses != null && \
      e.addresses.exists(a, a in params.spec.addresses))";

/// The webhook's refusal, word for word but for the webhook's limit of ten addresses shown.
const REFUSAL: &str = "'EndpointSlice ' + object.metadata.namespace + '/' + object.metadata.name + \
    ' is not carried: EdgeReachability in ' + object.metadata.namespace + ' names none of its addresses (' + \
    object.endpoints.filter(e, has(e.addresses) && e.addresses != null).map(e, e.addresses.join(', ')).join(', ') + ')'";

fn metadata() -> ObjectMeta {
    ObjectMeta {
        name: Some(NAME.into()),
        labels: Some([(ENFORCES.0.to_owned(), ENFORCES.1.to_owned())].into()),
        ..ObjectMeta::default()
    }
}

/// The policy, watching only (`failurePolicy: Ignore`); components/enforce makes it `Fail`.
pub fn policy() -> ValidatingAdmissionPolicy {
    let (key, value) = copy_label();
    ValidatingAdmissionPolicy {
        metadata: metadata(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Ignore".into()),
            param_kind: Some(ParamKind {
                api_version: Some(format!("{}/{}", super::crd::GROUP, super::crd::VERSION)),
                kind: Some("EdgeReachability".into()),
            }),
            match_constraints: Some(MatchResources {
                match_policy: Some("Equivalent".into()),
                object_selector: Some(LabelSelector {
                    match_labels: Some([(key.to_owned(), value.to_owned())].into()),
                    ..LabelSelector::default()
                }),
                namespace_selector: Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "kubernetes.io/metadata.name".into(),
                        operator: "NotIn".into(),
                        values: Some(vec!["kube-system".into(), "edgegate-system".into()]),
                    }]),
                    ..LabelSelector::default()
                }),
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec!["discovery.k8s.io".into()]),
                    api_versions: Some(vec!["v1".into()]),
                    operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                    resources: Some(vec!["endpointslices".into()]),
                    scope: Some("Namespaced".into()),
                    ..NamedRuleWithOperations::default()
                }]),
                ..MatchResources::default()
            }),
            match_conditions: Some(policy_match_conditions()),
            validations: Some(vec![Validation {
                expression: NAMED.into(),
                message_expression: Some(REFUSAL.into()),
                reason: Some("Forbidden".into()),
                ..Validation::default()
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        ..ValidatingAdmissionPolicy::default()
    }
}

/// The binding: each copy against its own namespace's record `default`, no record → admitted.
/// Watching only (`Warn`, `Audit`); components/enforce makes it `Deny`.
pub fn binding() -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata: metadata(),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: NAME.into(),
            param_ref: Some(ParamRef {
                name: Some(super::record::DEFAULT_RECORD_NAME.into()),
                parameter_not_found_action: Some("Allow".into()),
                ..ParamRef::default()
            }),
            validation_actions: vec!["Warn".into(), "Audit".into()],
            ..ValidatingAdmissionPolicyBindingSpec::default()
        },
    }
}

/// Both, as one YAML stream.
pub fn policy_yaml() -> Result<String, serde_saphyr::ser_error::Error> {
    Ok(format!("---\n{}---\n{}", serde_saphyr::to_string(&policy())?, serde_saphyr::to_string(&binding())?))
}
