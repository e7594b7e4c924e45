//! Which EndpointSlices are copies: a Kubernetes equality-based label selector.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The label selector that identifies copies. Defaults to the label the cells' write-back sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopySelector {
    requirements: Vec<Requirement>,
    text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

pub const DEFAULT_COPY_SELECTOR: &str = "networking.datumapis.com/vpc-endpointslice-projection=true";

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("empty copy selector: it would judge every EndpointSlice as a copy")]
    Empty,
    #[error("selector term {0:?} is not `key=value`, `key!=value`, `key` or `!key`")]
    Term(String),
}

impl CopySelector {
    /// Does an object with these labels match?
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }

    /// The selector as the API server's `labelSelector` parameter takes it.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl Default for CopySelector {
    fn default() -> Self {
        DEFAULT_COPY_SELECTOR.parse().unwrap_or_else(|_| unreachable!("default selector parses"))
    }
}

impl FromStr for CopySelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let valid_key = |k: &str| {
            !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
        };
        let valid_value = |v: &str| v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        let mut requirements = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let bad = || SelectorError::Term(term.to_owned());
            let req = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().to_owned())
            } else {
                Requirement::Exists(term.to_owned())
            };
            let ok = match &req {
                Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => valid_key(k) && valid_value(v),
                Requirement::Exists(k) | Requirement::NotExists(k) => valid_key(k),
            };
            if !ok {
                return Err(bad());
            }
            requirements.push(req);
        }
        if requirements.is_empty() {
            return Err(SelectorError::Empty);
        }
        Ok(CopySelector { requirements, text: s.trim().to_owned() })
    }
}

impl fmt::Display for CopySelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn default_selects_copies_only() {
        let sel = CopySelector::default();
        let copy = labels(&[("networking.datumapis.com/vpc-endpointslice-projection", "true")]);
        let not_copy = labels(&[("networking.datumapis.com/vpc-endpointslice-projection", "false")]);
        assert!(sel.matches(Some(&copy)));
        assert!(!sel.matches(Some(&not_copy)));
        assert!(!sel.matches(Some(&labels(&[]))));
        assert!(!sel.matches(None));
    }

    #[test]
    fn parses_equality_based_terms() {
        let sel: CopySelector = "a=1, b==2,c!=3,d,!e".parse().expect("valid");
        assert!(sel.matches(Some(&labels(&[("a", "1"), ("b", "2"), ("d", "")]))));
        assert!(!sel.matches(Some(&labels(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "")]))));
        assert!(!sel.matches(Some(&labels(&[("a", "1"), ("b", "2"), ("d", ""), ("e", "x")]))));
        assert_eq!(sel.as_str(), "a=1, b==2,c!=3,d,!e");
    }

    #[test]
    fn refuses_bad_selectors() {
        assert_eq!("".parse::<CopySelector>(), Err(SelectorError::Empty));
        assert_eq!(" , ".parse::<CopySelector>(), Err(SelectorError::Empty));
        assert!("a in (b)".parse::<CopySelector>().is_err());
        assert!("=x".parse::<CopySelector>().is_err());
    }
}
