//! How a record's write ended, and why the hub refused one: told by its `Status`, never by its
//! message.

/// How one namespace's write ended (the `result` label of `edgegate_producer_writes_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    Applied,
    Unchanged,
    NoHubNamespace,
    Oversized,
    Conflict,
    Error,
    /// Not attempted: not leading, or the project or the hub not synced.
    Skipped,
}

impl Written {
    /// Every outcome that is counted (a skipped write is not an outcome).
    pub const COUNTED: [Written; 6] = [
        Written::Applied,
        Written::Unchanged,
        Written::NoHubNamespace,
        Written::Oversized,
        Written::Conflict,
        Written::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Written::Applied => "applied",
            Written::Unchanged => "unchanged",
            Written::NoHubNamespace => "no_hub_namespace",
            Written::Oversized => "oversized",
            Written::Conflict => "conflict",
            Written::Error => "error",
            Written::Skipped => "skipped",
        }
    }
}

/// Why the hub refused a record's apply (409), told by its `Status`, never by its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another field manager owns what the apply changes: causes of reason
    /// `FieldManagerConflict`.
    FieldManagers,
    /// The resourceVersion the write was based on is not the record's any more (reason
    /// `Conflict`, no causes): the watch brings the newer record.
    Stale,
    /// Anything else: retried after a backoff, never taken for one of the above.
    Other,
}

impl Refusal {
    pub fn of(status: &kube::core::Status) -> Refusal {
        let causes = status.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
        if status.code != 409 {
            Refusal::Other
        } else if !causes.is_empty() && causes.iter().all(|c| c.reason == "FieldManagerConflict") {
            Refusal::FieldManagers
        } else if causes.is_empty() && status.reason == "Conflict" {
            Refusal::Stale
        } else {
            Refusal::Other
        }
    }
}
