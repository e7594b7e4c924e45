//! The deletion verdict: from the facts about one copy its record names none of, delete it or
//! keep it, and why. Two rules, each a pure function of plain values: the pruner's own (it leads,
//! its caches are whole, the copy has been unnamed for the whole grace and still is) and, when
//! the producer prunes, the evidence that the record's silence is a withdrawal (the copy's
//! project watched, whole and answering, its record written, nothing of the copy's served). Every
//! doubt keeps the copy: a route withdrawn from a pod that serves black-holes live traffic, one
//! left up costs a table entry. The edges gather the facts, ask here, and act.

/// What the pruner knows of a planned deletion, right before acting on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Facts {
    /// This replica leads, and the record and copy caches are whole.
    pub may_delete: bool,
    /// Unnamed at every look for the whole grace.
    pub due: bool,
    /// The copy is still in the index.
    pub present: bool,
    /// The record, as known now, names none of the copy's addresses.
    pub unnamed: bool,
}

/// Why a copy is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Keep {
    /// Not leading, or a cache not whole: nothing is known now.
    NotNow,
    /// The record named it within the grace (its run began again).
    NotDue,
    /// Gone from the index (deleted, or never there).
    Gone,
    /// The record names one of its addresses again.
    Named,
    /// The evidence doubts the record's silence.
    Doubt(Doubt),
}

/// What to do with one copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Delete,
    Keep(Keep),
}

/// The pruner's own rule, then the evidence's doubt where there is evidence (`doubt` is asked
/// only when the rule alone would delete, so a gate that remembers what it was asked is asked
/// only about copies that are due).
pub fn verdict(facts: &Facts, doubt: impl FnOnce() -> Option<Doubt>) -> Verdict {
    let keep = if !facts.may_delete {
        Keep::NotNow
    } else if !facts.due {
        Keep::NotDue
    } else if !facts.present {
        Keep::Gone
    } else if !facts.unnamed {
        Keep::Named
    } else if let Some(doubt) = doubt() {
        Keep::Doubt(doubt)
    } else {
        return Verdict::Delete;
    };
    Verdict::Keep(keep)
}

/// Why the evidence keeps a due copy (the `reason` of `edgegate_producer_prune_held_namespaces`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Doubt {
    /// No engaged project owns its hub namespace: nobody watches what it serves.
    Unwatched,
    /// Its project (or the hub) has not been whole for long enough, did not answer a live read,
    /// or holds an object that cannot be decoded.
    Incomplete,
    /// Its record's last write failed, or its answer was too large to write.
    Unwritten,
    /// The project serves one of its addresses now, or did lately.
    Served,
    /// Sharing: its project's bucket is another replica's (that one judges it).
    Elsewhere,
}

impl Doubt {
    pub const ALL: [Doubt; 5] =
        [Doubt::Unwatched, Doubt::Incomplete, Doubt::Unwritten, Doubt::Served, Doubt::Elsewhere];

    pub fn label(self) -> &'static str {
        match self {
            Doubt::Unwatched => "unwatched",
            Doubt::Incomplete => "incomplete",
            Doubt::Unwritten => "unwritten",
            Doubt::Served => "served",
            Doubt::Elsewhere => "elsewhere",
        }
    }
}

/// Who owns a copy's hub namespace, as far as this replica can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// An engaged project has the namespace: what it knows of it.
    Watched(Watched),
    /// Its labelled project is engaged but not listed whole yet: it may just not know it yet.
    Listing,
    /// Sharing: a project another replica holds (by its label, or unlabelled and not found here).
    Elsewhere,
    /// No engaged project owns it.
    Unwatched,
}

/// What the project that owns a copy's hub namespace knows of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Watched {
    /// Sharing: this replica holds the project's bucket (always, unshared).
    pub ours: bool,
    /// The hub's namespaces and records are listed and followed.
    pub hub_synced: bool,
    /// The project has been whole for `--withdraw-after` + `--grace`: whatever served in the
    /// grace was seen, written and held in the record for `--withdraw-after`.
    pub whole_long_enough: bool,
    /// The project's last live read did not fail lately.
    pub answering: bool,
    /// Nothing in the project namespace fails to decode.
    pub decodable: bool,
    /// The record's last write failed, or its answer was too large to write.
    pub unwritten: bool,
    /// An address of the copy's is served now, or was within `--withdraw-after` + `--grace`
    /// (whatever the record says).
    pub served: bool,
}

/// The evidence's doubt about a due copy, if any, and in a few words why (for the log).
pub fn doubt(owner: &Owner) -> Option<(Doubt, &'static str)> {
    let watched = match owner {
        Owner::Watched(watched) => watched,
        Owner::Listing => return Some((Doubt::Incomplete, "its project is listing")),
        Owner::Elsewhere => return Some((Doubt::Elsewhere, "another replica holds its project's bucket")),
        Owner::Unwatched => return Some((Doubt::Unwatched, "no engaged project owns it")),
    };
    Some(if !watched.ours {
        (Doubt::Elsewhere, "another replica holds its project's bucket")
    } else if !watched.hub_synced {
        (Doubt::Incomplete, "the hub's view is not synced")
    } else if !watched.whole_long_enough {
        (Doubt::Incomplete, "its project not whole for --withdraw-after + --grace")
    } else if !watched.answering {
        (Doubt::Incomplete, "its project did not answer a live read")
    } else if !watched.decodable {
        (Doubt::Incomplete, "an object there cannot be decoded")
    } else if watched.unwritten {
        (Doubt::Unwritten, "its record's last write failed")
    } else if watched.served {
        (Doubt::Served, "an address of its is served, or was lately")
    } else {
        return None;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELETABLE: Facts = Facts { may_delete: true, due: true, present: true, unnamed: true };

    /// One row per reason: the one fact that keeps the copy, everything else as for a deletion.
    #[test]
    fn the_pruners_rule_keeps_on_each_missing_fact() {
        let rows: [(Facts, Option<Doubt>, Verdict); 7] = [
            (DELETABLE, None, Verdict::Delete),
            (Facts { may_delete: false, ..DELETABLE }, None, Verdict::Keep(Keep::NotNow)),
            (Facts { due: false, ..DELETABLE }, None, Verdict::Keep(Keep::NotDue)),
            (Facts { present: false, ..DELETABLE }, None, Verdict::Keep(Keep::Gone)),
            (Facts { unnamed: false, ..DELETABLE }, None, Verdict::Keep(Keep::Named)),
            (DELETABLE, Some(Doubt::Served), Verdict::Keep(Keep::Doubt(Doubt::Served))),
            (Facts { may_delete: false, ..DELETABLE }, Some(Doubt::Served), Verdict::Keep(Keep::NotNow)),
        ];
        for (facts, doubt, expected) in rows {
            assert_eq!(verdict(&facts, || doubt), expected, "{facts:?} {doubt:?}");
        }
    }

    #[test]
    fn the_evidence_is_asked_only_about_a_copy_the_rule_would_delete() {
        let mut asked = 0;
        let _ = verdict(&Facts { due: false, ..DELETABLE }, || {
            asked += 1;
            None
        });
        assert_eq!(asked, 0);
    }

    const SURE: Watched = Watched {
        ours: true,
        hub_synced: true,
        whole_long_enough: true,
        answering: true,
        decodable: true,
        unwritten: false,
        served: false,
    };

    /// One row per doubt: the one fact that raises it, everything else as for a deletion.
    #[test]
    fn each_doubt_keeps_the_copy() {
        let rows: [(Owner, Option<Doubt>); 11] = [
            (Owner::Watched(SURE), None),
            (Owner::Listing, Some(Doubt::Incomplete)),
            (Owner::Elsewhere, Some(Doubt::Elsewhere)),
            (Owner::Unwatched, Some(Doubt::Unwatched)),
            (Owner::Watched(Watched { ours: false, ..SURE }), Some(Doubt::Elsewhere)),
            (Owner::Watched(Watched { hub_synced: false, ..SURE }), Some(Doubt::Incomplete)),
            (Owner::Watched(Watched { whole_long_enough: false, ..SURE }), Some(Doubt::Incomplete)),
            (Owner::Watched(Watched { answering: false, ..SURE }), Some(Doubt::Incomplete)),
            (Owner::Watched(Watched { decodable: false, ..SURE }), Some(Doubt::Incomplete)),
            (Owner::Watched(Watched { unwritten: true, ..SURE }), Some(Doubt::Unwritten)),
            (Owner::Watched(Watched { served: true, ..SURE }), Some(Doubt::Served)),
        ];
        for (owner, expected) in rows {
            assert_eq!(doubt(&owner).map(|(d, _)| d), expected, "{owner:?}");
        }
    }

    /// Another replica's project is that replica's to judge, whatever else is known here.
    #[test]
    fn a_project_held_elsewhere_is_elsewhere_before_anything_else() {
        let everything_wrong = Watched {
            ours: false,
            hub_synced: false,
            whole_long_enough: false,
            answering: false,
            decodable: false,
            unwritten: true,
            served: true,
        };
        assert_eq!(doubt(&Owner::Watched(everything_wrong)).map(|(d, _)| d), Some(Doubt::Elsewhere));
    }
}
