//! Map keys for the values converted into the interpreter's form. The same
//! few names (`metadata`, `spec`, `containers`, `name`, `resources`, the
//! fields of the `gpu` facts...) come back in every request; each thread
//! keeps the text of those it has seen and hands out shared copies instead
//! of allocating the name again for every map of every request.
use kube_cel::cel::common::types::{CelMapKey, CelString};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

/// Names kept per thread; past this the kept ones are dropped and the
/// count starts again (object keys are the requester's to choose).
const MAX_KEPT: usize = 4096;

/// Longer names are not kept: label and annotation keys run up to 317
/// bytes, and a long name is rarely seen twice.
const MAX_KEPT_LEN: usize = 64;

thread_local! {
    static KEPT: RefCell<HashSet<Arc<str>, foldhash::fast::RandomState>> =
        RefCell::new(HashSet::default());
}

/// The map key `name`.
pub(super) fn key(name: &str) -> CelMapKey {
    CelMapKey::String(CelString::from(shared(name)))
}

/// `name`'s text, shared with the other keys of this thread that spell it.
fn shared(name: &str) -> Arc<str> {
    if name.len() > MAX_KEPT_LEN {
        return name.into();
    }
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        if let Some(text) = kept.get(name) {
            return text.clone();
        }
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        let text: Arc<str> = name.into();
        kept.insert(text.clone());
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(key: &CelMapKey) -> &Arc<str> {
        let CelMapKey::String(s) = key else {
            panic!("a string key")
        };
        s.shared()
    }

    #[test]
    fn a_name_seen_again_shares_its_text() {
        let (a, b) = (key("containers"), key("containers"));
        assert_eq!(a, b);
        assert!(Arc::ptr_eq(text(&a), text(&b)));
        assert!(!Arc::ptr_eq(text(&key("spec")), text(&a)));
        let long = "x".repeat(MAX_KEPT_LEN + 1);
        let (c, d) = (key(&long), key(&long));
        assert_eq!(c, d);
        assert!(!Arc::ptr_eq(text(&c), text(&d)), "long names are not kept");
    }

    #[test]
    fn the_kept_names_are_bounded() {
        for i in 0..MAX_KEPT + 10 {
            key(&format!("k{i}"));
        }
        KEPT.with(|kept| assert!(kept.borrow().len() <= MAX_KEPT));
        assert_eq!(key("k1"), key("k1"));
    }
}
