//! The corpus: every case, in the order they run.

mod basics;
mod channel;
mod escapes;
mod kernel;
mod limits;
mod requests;

use crate::Case;

/// Every case, in order (each one's [`Case::index`] set).
pub fn corpus() -> Vec<Case> {
    let mut all = Vec::new();
    all.extend(basics::cases());
    all.extend(escapes::cases());
    all.extend(kernel::cases());
    all.extend(limits::cases());
    all.extend(channel::cases());
    all.extend(requests::cases());
    for (i, case) in all.iter_mut().enumerate() {
        case.index = i;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_known_failures_name_real_cases() {
        let cases = corpus();
        let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate case names");
        for k in crate::KNOWN_FAILURES {
            assert!(names.contains(&k.case), "{k:?} names no case");
        }
    }
}
