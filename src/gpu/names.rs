//! Lists of SKU names that live longer than a request (every SKU of the
//! catalog, the SKUs a placement profile allows) and are shown to CEL on
//! every request. A consumer that converts values into another form (the
//! CEL interpreter's) converts such a list once and keeps the result with
//! it; every request after that shares it.
use serde::{Serialize, Serializer};
use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

/// The serde newtype name a [`SkuList`] serializes under. A serializer
/// that knows it may ask [`SkuList::serializing`] for the list and use a
/// form it converted before ([`SkuList::converted`]) instead of the
/// elements; any other serializer writes the names as a plain sequence.
pub const SKU_LIST: &str = "$gpu_admission::SkuList";

/// SKU names in catalog order. Cloning shares the list.
#[derive(Clone, Default)]
pub struct SkuList(Arc<Shared>);

#[derive(Default)]
struct Shared {
    names: Box<[String]>,
    /// The list in a consumer's form, made once by the first consumer.
    converted: OnceLock<Box<dyn Any + Send + Sync>>,
}

thread_local! {
    /// The list whose `serialize` is running on this thread.
    static SERIALIZING: RefCell<Option<SkuList>> = const { RefCell::new(None) };
}

impl SkuList {
    pub fn new(names: Vec<String>) -> SkuList {
        SkuList(Arc::new(Shared {
            names: names.into_boxed_slice(),
            converted: OnceLock::new(),
        }))
    }

    /// The list being serialized on this thread, for a serializer inside
    /// [`SKU_LIST`]'s newtype; `None` anywhere else.
    pub fn serializing() -> Option<SkuList> {
        SERIALIZING.with(|s| s.borrow().clone())
    }

    /// The list in the form `convert` makes, made on the first call and
    /// kept with the list; `None` if an earlier call kept another type.
    pub fn converted<T: Any + Send + Sync>(
        &self,
        convert: impl FnOnce(&[String]) -> T,
    ) -> Option<&T> {
        self.0
            .converted
            .get_or_init(|| Box::new(convert(&self.0.names)))
            .downcast_ref()
    }
}

impl Deref for SkuList {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.0.names
    }
}

impl From<Vec<String>> for SkuList {
    fn from(names: Vec<String>) -> SkuList {
        SkuList::new(names)
    }
}

impl PartialEq for SkuList {
    fn eq(&self, other: &SkuList) -> bool {
        self.0.names == other.0.names
    }
}

impl Eq for SkuList {}

impl fmt::Debug for SkuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.names.iter()).finish()
    }
}

impl Serialize for SkuList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let outer = SERIALIZING.with(|s| s.replace(Some(self.clone())));
        let written = serializer.serialize_newtype_struct(SKU_LIST, &*self.0.names);
        SERIALIZING.with(|s| *s.borrow_mut() = outer);
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_sees_a_plain_list() {
        let list = SkuList::new(vec!["Standard_NC4as_T4_v3".into(), "b".into()]);
        assert_eq!(
            serde_json::to_value(&list).unwrap(),
            serde_json::json!(["Standard_NC4as_T4_v3", "b"])
        );
        assert_eq!(format!("{list:?}"), r#"["Standard_NC4as_T4_v3", "b"]"#);
        assert_eq!(list.len(), 2);
        assert!(SkuList::serializing().is_none(), "nothing is left behind");
    }

    #[test]
    fn the_converted_form_is_made_once_and_shared_by_clones() {
        let list = SkuList::new(vec!["a".into(), "b".into()]);
        let clone = list.clone();
        let mut made = 0;
        let first = list.converted(|names| {
            made += 1;
            names.join(",")
        });
        assert_eq!(first.map(String::as_str), Some("a,b"));
        let again = clone.converted(|_| {
            made += 1;
            String::new()
        });
        assert_eq!(again.map(String::as_str), Some("a,b"));
        assert_eq!(made, 1);
        assert_eq!(clone.converted(|_| 0u8), None, "another type was kept");
    }
}
