//! Trim mode: instead of refusing a copy, remove the endpoints its record does not name.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};

use crate::core::record::Record;
use crate::core::slice::Slice;

/// Annotation that says how many endpoints edgegate trimmed from a copy.
pub const TRIMMED_ANNOTATION: &str = "networking.datumapis.com/edgegate-trimmed-endpoints";

/// What trimming a copy under a present record leaves.
#[derive(Debug, PartialEq)]
pub enum Trim {
    /// Every endpoint has a named address: nothing to change.
    Unchanged,
    /// Some endpoints go: apply this patch, which also sets [`TRIMMED_ANNOTATION`].
    Patch { removed: usize, patch: Patch },
    /// No endpoint would remain: the copy is refused as in validate mode.
    Empty,
}

/// Plan the trim of `slice` under `record`. An endpoint stays when any of its addresses is named.
pub fn trim(record: &Record, slice: &Slice) -> Trim {
    let endpoints = &slice.endpoints;
    let unnamed: Vec<usize> = endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.addresses.is_empty() && !e.addresses.iter().any(|a| record.names(a)))
        .map(|(i, _)| i)
        .collect();
    if unnamed.is_empty() {
        return Trim::Unchanged;
    }
    let keeps_an_address = endpoints.iter().enumerate().any(|(i, e)| !e.addresses.is_empty() && !unnamed.contains(&i));
    if !keeps_an_address {
        return Trim::Empty;
    }
    let mut ops = Vec::with_capacity(unnamed.len() + 2);
    // Highest index first, so each removal leaves the indices still to remove in place.
    for i in unnamed.iter().rev() {
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(["endpoints".to_owned(), i.to_string()]),
        }));
    }
    if slice.metadata.annotations.is_none() {
        ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: serde_json::json!({}),
        }));
    }
    ops.push(PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(["metadata", "annotations", TRIMMED_ANNOTATION]),
        value: serde_json::Value::String(unnamed.len().to_string()),
    }));
    Trim::Patch { removed: unnamed.len(), patch: Patch(ops) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::copy;

    fn apply(slice: &Slice, patch: &Patch) -> Slice {
        let mut doc = serde_json::to_value(slice).expect("serialises");
        json_patch::patch(&mut doc, patch).expect("patch applies");
        serde_json::from_value(doc).expect("still an EndpointSlice")
    }

    #[test]
    fn removes_unnamed_endpoints_and_annotates() {
        let record = Record::from_entries(["fd00::2"]);
        let slice = copy("p", "s", &["fd00::1", "fd00::2", "fd00::3"]);
        let Trim::Patch { removed, patch } = trim(&record, &slice) else {
            panic!("expected a patch");
        };
        assert_eq!(removed, 2);
        let trimmed = apply(&slice, &patch);
        let left: Vec<&str> = trimmed.addresses().collect();
        assert_eq!(left, ["fd00::2"]);
        assert_eq!(
            trimmed.metadata.annotations.as_ref().and_then(|a| a.get(TRIMMED_ANNOTATION)),
            Some(&"2".to_owned())
        );
    }

    #[test]
    fn unchanged_when_all_named_and_empty_when_none() {
        let slice = copy("p", "s", &["fd00::1", "fd00::2"]);
        assert_eq!(trim(&Record::from_entries(["fd00::1", "fd00::2"]), &slice), Trim::Unchanged);
        assert_eq!(trim(&Record::from_entries(["fd00::9"]), &slice), Trim::Empty);
        assert_eq!(trim(&Record::default(), &copy("p", "s", &[])), Trim::Unchanged);
    }

    #[test]
    fn keeps_existing_annotations() {
        let record = Record::from_entries(["fd00::2"]);
        let mut slice = copy("p", "s", &["fd00::1", "fd00::2"]);
        slice.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        let Trim::Patch { patch, .. } = trim(&record, &slice) else { panic!("expected a patch") };
        let trimmed = apply(&slice, &patch);
        let annotations = trimmed.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.get("a"), Some(&"b".to_owned()));
        assert_eq!(annotations.len(), 2);
    }
}
