//! Which KubernetesService the watched cluster is: discovered models land under it
//! (their trust domains' and instances' `owner`), and with several in the repo, each
//! cluster's files go to a directory of its own.

use std::collections::BTreeSet;

use thiserror::Error;

/// What says which KubernetesService the watched cluster is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterChoice {
    /// Named by the user (`--kubernetes-service`); written to the repo when missing.
    pub named: Option<String>,
    /// The kubeconfig context in use: with several KubernetesServices, the one
    /// named like it.
    pub context: Option<String>,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClusterChoiceError {
    #[error(
        "the repo has several KubernetesServices ({}) and none is named like the kubeconfig context{}: cannot tell which one the watched cluster is",
        .choices.join(", "),
        .context.as_deref().map(|c| format!(" \"{c}\"")).unwrap_or_default()
    )]
    Ambiguous {
        choices: Vec<String>,
        context: Option<String>,
    },
}

impl ClusterChoice {
    /// The watched cluster's KubernetesService among the repo's `services`: the one
    /// named, else the only one, else the one named like the context. `None` when the
    /// repo has none and none is named (discovered models then name no owner).
    pub fn service(&self, services: &BTreeSet<&str>) -> Result<Option<String>, ClusterChoiceError> {
        if let Some(named) = &self.named {
            return Ok(Some(named.clone()));
        }
        match services.len() {
            0 => Ok(None),
            1 => Ok(services.first().map(|s| s.to_string())),
            _ => match &self.context {
                Some(context) if services.contains(context.as_str()) => Ok(Some(context.clone())),
                context => Err(ClusterChoiceError::Ambiguous {
                    choices: services.iter().map(|s| s.to_string()).collect(),
                    context: context.clone(),
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(named: Option<&str>, context: Option<&str>) -> ClusterChoice {
        ClusterChoice {
            named: named.map(str::to_string),
            context: context.map(str::to_string),
        }
    }

    #[test]
    fn the_named_service_then_the_only_one_then_the_contexts() {
        let two = BTreeSet::from(["east", "west"]);
        let one = BTreeSet::from(["east"]);
        let none = BTreeSet::new();
        let pick = |c: ClusterChoice, s: &BTreeSet<&str>| c.service(s).unwrap();
        assert_eq!(
            pick(choice(Some("north"), Some("west")), &two).as_deref(),
            Some("north")
        );
        assert_eq!(
            pick(choice(None, Some("kind-dev")), &one).as_deref(),
            Some("east")
        );
        assert_eq!(
            pick(choice(None, Some("west")), &two).as_deref(),
            Some("west")
        );
        assert_eq!(pick(choice(None, Some("west")), &none), None);
        let error = choice(None, Some("kind-dev")).service(&two).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the repo has several KubernetesServices (east, west) and none is named like the kubeconfig context \"kind-dev\": cannot tell which one the watched cluster is"
        );
    }
}
