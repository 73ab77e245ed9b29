use crate::common::traits::{Adder, Container, Indexer, Iterable};
use crate::common::types::{CelInt, CelUInt, Type};
use crate::common::value::Val;
use crate::common::{traits, types};
use crate::ExecutionError;
use std::any::Any;
use std::borrow::Cow;
use std::ops::Deref;

// gpu-admission patch: the elements are shared behind an `Arc`, so that
// cloning a list (field selection, comprehension variables) is O(1) instead
// of a deep copy.
#[derive(Debug, Default)]
pub struct DefaultList(std::sync::Arc<Vec<Box<dyn Val>>>);

impl DefaultList {
    pub fn into_inner(self) -> Vec<Box<dyn Val>> {
        std::sync::Arc::try_unwrap(self.0)
            .unwrap_or_else(|shared| shared.iter().map(|i| i.clone_as_boxed()).collect())
    }

    pub fn inner(&self) -> &[Box<dyn Val>] {
        &self.0
    }

    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl Deref for DefaultList {
    type Target = [Box<dyn Val>];

    fn deref(&self) -> &Self::Target {
        self.inner()
    }
}

impl Val for DefaultList {
    fn get_type(&self) -> Type<'_> {
        types::LIST_TYPE
    }

    fn as_adder(&self) -> Option<&dyn Adder> {
        Some(self)
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_indexer(&self) -> Option<&dyn Indexer> {
        Some(self)
    }

    fn into_indexer(self: Box<Self>) -> Option<Box<dyn Indexer>> {
        Some(self)
    }

    fn as_iterable(&self) -> Option<&dyn Iterable> {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Self>()
            .is_some_and(|other| self.0 == other.0)
    }

    fn clone_as_boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

impl Adder for DefaultList {
    fn add<'a>(&'a self, rhs: &dyn Val) -> Result<Cow<'a, dyn Val>, ExecutionError> {
        let mut rhs = rhs
            .as_iterable()
            .ok_or(ExecutionError::NoSuchOverload)?
            .iter();
        let mut list: Vec<Box<dyn Val>> = self.0.iter().map(|i| i.clone_as_boxed()).collect();
        while let Some(other) = rhs.next() {
            list.push(other.clone_as_boxed());
        }
        Ok(Cow::<dyn Val>::Owned(Box::new(DefaultList::from(list))))
    }
}

impl Container for DefaultList {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        for i in self.0.iter() {
            if i.equals(value) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// gpu-admission patch: a double index as the int it holds, or an error.
fn integral_index(idx: &dyn Val) -> Result<CelInt, ExecutionError> {
    let d = *idx
        .downcast_ref::<types::CelDouble>()
        .ok_or(ExecutionError::NoSuchOverload)?
        .inner();
    if d.is_finite()
        && d.fract() == 0.0
        && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&d)
    {
        Ok(CelInt::from(d as i64))
    } else {
        Err(ExecutionError::function_error(
            "_[_]",
            format!("unsupported index value {d}"),
        ))
    }
}

impl Indexer for DefaultList {
    fn get<'a>(&'a self, idx: &dyn Val) -> Result<Cow<'a, dyn Val>, ExecutionError> {
        match idx.get_type() {
            types::INT_TYPE => {
                let idx: i64 = *idx
                    .downcast_ref::<CelInt>()
                    .ok_or(ExecutionError::NoSuchOverload)?
                    .inner();
                Ok(Cow::Borrowed(
                    self.0
                        .get(idx as usize)
                        .ok_or_else(|| ExecutionError::IndexOutOfBounds(idx.into()))?
                        .as_ref(),
                ))
            }
            types::UINT_TYPE => {
                let idx: u64 = *idx
                    .downcast_ref::<CelUInt>()
                    .ok_or(ExecutionError::NoSuchOverload)?
                    .inner();
                Ok(Cow::Borrowed(
                    self.0
                        .get(idx as usize)
                        .ok_or_else(|| ExecutionError::IndexOutOfBounds(idx.into()))?
                        .as_ref(),
                ))
            }
            // gpu-admission patch: a double that holds an integer indexes
            // a list as that integer (`[7, 8, 9][dyn(0.0)]`), as in cel-go.
            types::DOUBLE_TYPE => self.get(&integral_index(idx)?),
            _ => Err(ExecutionError::UnexpectedType {
                got: idx.get_type().runtime_type_name.to_string(),
                want: format!(
                    "{}|{}",
                    types::INT_TYPE.runtime_type_name,
                    types::UINT_TYPE.runtime_type_name
                ),
            }),
        }
    }

    fn steal(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val>, ExecutionError> {
        let list = self;
        match idx.get_type() {
            types::INT_TYPE => {
                let idx: i64 = *idx
                    .downcast_ref::<CelInt>()
                    .ok_or(ExecutionError::NoSuchOverload)?
                    .inner();
                if idx < 0 || idx as usize >= list.0.len() {
                    return Err(ExecutionError::IndexOutOfBounds(idx.into()));
                }
                Ok(list.0[idx as usize].clone_as_boxed())
            }
            types::UINT_TYPE => {
                let idx: u64 = *idx
                    .downcast_ref::<CelUInt>()
                    .ok_or(ExecutionError::NoSuchOverload)?
                    .inner();
                if idx as usize >= list.0.len() {
                    return Err(ExecutionError::IndexOutOfBounds(idx.into()));
                }
                Ok(list.0[idx as usize].clone_as_boxed())
            }
            // gpu-admission patch: see `get`.
            types::DOUBLE_TYPE => list.steal(&integral_index(idx)?),
            _ => Err(ExecutionError::UnexpectedType {
                got: idx.get_type().runtime_type_name.to_string(),
                want: format!(
                    "{}|{}",
                    types::INT_TYPE.runtime_type_name,
                    types::UINT_TYPE.runtime_type_name
                ),
            }),
        }
    }
}

impl Iterable for DefaultList {
    fn iter<'a>(&'a self) -> Box<dyn super::traits::Iterator<'a> + 'a> {
        Box::new(SliceIterator::new(self.0.as_slice()))
    }
}

impl From<Vec<Box<dyn Val>>> for DefaultList {
    fn from(v: Vec<Box<dyn Val>>) -> Self {
        Self(std::sync::Arc::new(v))
    }
}

impl TryFrom<Box<dyn Val>> for Vec<Box<dyn Val>> {
    type Error = Box<dyn Val>;

    fn try_from(value: Box<dyn Val>) -> Result<Self, Self::Error> {
        super::cast_boxed::<DefaultList>(value).map(|l| l.into_inner())
    }
}

impl<'a> TryFrom<&'a dyn Val> for &'a [Box<dyn Val>] {
    type Error = &'a dyn Val;

    fn try_from(value: &'a dyn Val) -> Result<Self, Self::Error> {
        if let Some(list) = <dyn Any>::downcast_ref::<DefaultList>(value) {
            return Ok(list.inner());
        }
        Err(value)
    }
}

pub struct SliceIterator<'a> {
    list: &'a [Box<dyn Val>],
    pos: usize,
}

impl<'a> SliceIterator<'a> {
    fn new(list: &'a [Box<dyn Val>]) -> Self {
        Self { list, pos: 0 }
    }
}

impl<'a> traits::Iterator<'a> for SliceIterator<'a> {
    fn next(&mut self) -> Option<&'a dyn Val> {
        if self.pos >= self.list.len() {
            None
        } else {
            let r = &self.list[self.pos];
            self.pos += 1;
            Some(r.as_ref())
        }
    }
}

#[cfg(test)]
pub mod tests {
    use crate::common::traits::Indexer;
    use crate::common::types::list::DefaultList;
    use crate::common::types::{CelInt, CelString};
    use crate::common::value::Val;
    use crate::ExecutionError::{IndexOutOfBounds, UnexpectedType};
    use std::borrow::Cow;

    #[test]
    fn list_has_indexer() {
        let list = Box::new(DefaultList::from(vec![]));
        assert!(list.as_indexer().is_some());
        assert!(list.into_indexer().is_some());
    }

    #[test]
    fn errs_out_of_index() {
        let list = DefaultList::from(vec![]);
        let idx: CelInt = 1.into();
        assert_eq!(
            Indexer::get(&list, &idx).err(),
            Some(IndexOutOfBounds(1.into()))
        );
        assert_eq!(
            Indexer::steal(list.into(), &idx).err(),
            Some(IndexOutOfBounds(1.into()))
        );
    }

    #[test]
    fn errs_unexpected_type() {
        let list = DefaultList::from(vec![]);
        let idx: CelString = "foo".into();
        assert_eq!(
            Indexer::get(&list, &idx).err(),
            Some(UnexpectedType {
                got: "string".to_string(),
                want: "int|uint".to_string(),
            })
        );
        assert_eq!(
            Indexer::steal(list.into(), &idx).err(),
            Some(UnexpectedType {
                got: "string".to_string(),
                want: "int|uint".to_string(),
            })
        );
    }

    #[test]
    fn get() {
        let val: CelString = "cel".into();
        let val: Box<dyn Val> = Box::new(val.clone());
        let list = DefaultList::from(vec![val]);
        let idx: CelInt = 0.into();
        let expected = Cow::<dyn Val>::Owned(Box::new(Into::<CelString>::into("cel")));
        assert_eq!(Indexer::get(&list, &idx), Ok(expected));
    }

    #[test]
    fn steal() {
        let val: CelString = "cel".into();
        let val: Box<dyn Val> = Box::new(val.clone());
        let list = DefaultList::from(vec![val]);
        let idx: CelInt = 0.into();
        let expected: Box<dyn Val> = Box::new(Into::<CelString>::into("cel"));
        assert_eq!(Indexer::steal(list.into(), &idx), Ok(expected));
    }

    #[test]
    fn try_into_vec() {
        let v1: Box<dyn Val> = Box::new(Into::<CelString>::into("cel"));
        let v2: Box<dyn Val> = Box::new(Into::<CelString>::into("rust"));
        let list: Box<dyn Val> = Box::new(DefaultList::from(vec![v1, v2]));
        let list: Vec<Box<dyn Val>> = list.try_into().unwrap();
        assert_eq!(list[0].downcast_ref::<CelString>().unwrap().inner(), "cel");
        assert_eq!(list[1].downcast_ref::<CelString>().unwrap().inner(), "rust");
    }

    #[test]
    fn try_into_slice() {
        let v1: Box<dyn Val> = Box::new(Into::<CelString>::into("cel"));
        let v2: Box<dyn Val> = Box::new(Into::<CelString>::into("rust"));
        let list: Box<dyn Val> = Box::new(DefaultList::from(vec![v1, v2]));
        let list: &[Box<dyn Val>] = list.as_ref().try_into().unwrap();
        assert_eq!(list[0].downcast_ref::<CelString>().unwrap().inner(), "cel");
        assert_eq!(list[1].downcast_ref::<CelString>().unwrap().inner(), "rust");
    }
}
