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
    /// Names of struct fields by where their text is: a `&'static str`
    /// never moves or changes, so its address and length say which name
    /// it is without reading it.
    static FIELDS: RefCell<[Option<Field>; FIELD_SLOTS]> =
        const { RefCell::new([const { None }; FIELD_SLOTS]) };
}

/// A struct field name remembered: its text's address and length, and
/// the shared text.
struct Field {
    at: usize,
    len: usize,
    text: Arc<str>,
}

/// Struct field names remembered by address per thread (the `gpu` facts
/// and the `request` variable have about fifty).
const FIELD_SLOTS: usize = 256;

/// The map key `name`.
pub(super) fn key(name: &str) -> CelMapKey {
    CelMapKey::String(CelString::from(shared(name)))
}

/// The map key for the struct field `name`: [`key`], found by the
/// address of the field name's text.
pub(super) fn field_key(name: &'static str) -> CelMapKey {
    let at = name.as_ptr() as usize;
    // Field names are stored a few bytes apart: the low bits vary most.
    let slot = (at ^ (at >> 8)) % FIELD_SLOTS;
    let text = FIELDS.with(|fields| {
        let mut fields = fields.borrow_mut();
        match &fields[slot] {
            Some(field) if field.at == at && field.len == name.len() => field.text.clone(),
            _ => {
                let text = shared(name);
                fields[slot] = Some(Field {
                    at,
                    len: name.len(),
                    text: text.clone(),
                });
                text
            }
        }
    });
    CelMapKey::String(CelString::from(text))
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
    fn field_names_share_the_text_of_keys() {
        static SPEC: &str = "spec";
        let (a, b) = (field_key(SPEC), field_key(SPEC));
        assert_eq!(a, key("spec"));
        assert!(Arc::ptr_eq(text(&a), text(&b)));
        assert!(Arc::ptr_eq(text(&a), text(&key("spec"))));
        // Two names at one address, as a prefix of a longer one: told
        // apart by their length.
        static BOTH: &str = "specification";
        let (short, long) = (&BOTH[..4], BOTH);
        assert_eq!(field_key(short), key("spec"));
        assert_eq!(field_key(long), key("specification"));
        assert_eq!(field_key(short), key("spec"));
        // More names than slots: every one still its own text.
        let names: Vec<&'static str> = (0..FIELD_SLOTS * 2)
            .map(|i| &*Box::leak(format!("f{i}").into_boxed_str()))
            .collect();
        for _ in 0..2 {
            for name in &names {
                assert_eq!(field_key(name), key(name));
            }
        }
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
