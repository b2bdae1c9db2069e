//! Typed indices into the model vectors of [`super::Models`]: an index of a Slice
//! cannot be used for an Image, and a vector parallel to the slices is indexed by
//! slice indices only.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// The position of a `T` in its vector. `fn() -> T` keeps it `Send`, `Sync` and
/// `Copy` whatever `T` is.
pub struct Idx<T> {
    index: usize,
    model: PhantomData<fn() -> T>,
}

impl<T> Idx<T> {
    pub fn new(index: usize) -> Self {
        Idx {
            index,
            model: PhantomData,
        }
    }

    pub fn index(self) -> usize {
        self.index
    }
}

/// Each item of `items` with its typed index, as `enumerate` does with plain ones.
pub fn indexed<T>(items: &[T]) -> impl Iterator<Item = (Idx<T>, &T)> {
    items.iter().enumerate().map(|(i, x)| (Idx::new(i), x))
}

// Derives would require `T` to implement each trait; an index never looks at a `T`.
impl<T> Clone for Idx<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Idx<T> {}

impl<T> PartialEq for Idx<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}

impl<T> Eq for Idx<T> {}

impl<T> PartialOrd for Idx<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Idx<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.index.cmp(&other.index)
    }
}

impl<T> Hash for Idx<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.index.hash(state);
    }
}

impl<T> fmt::Debug for Idx<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Idx({})", self.index)
    }
}

impl<T> Index<Idx<T>> for Vec<T> {
    type Output = T;

    fn index(&self, index: Idx<T>) -> &T {
        &self[index.index]
    }
}

/// A vector parallel to the vector of `M` models: one `L` per model, indexed by the
/// model's [`Idx`].
pub struct PerModel<M, L> {
    items: Vec<L>,
    model: PhantomData<fn() -> M>,
}

impl<M, L> PerModel<M, L> {
    pub fn iter(&self) -> std::slice::Iter<'_, L> {
        self.items.iter()
    }
}

impl<M, L: Clone> Clone for PerModel<M, L> {
    fn clone(&self) -> Self {
        self.items.iter().cloned().collect()
    }
}

impl<M, L: fmt::Debug> fmt::Debug for PerModel<M, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.items.fmt(f)
    }
}

impl<M, L> FromIterator<L> for PerModel<M, L> {
    fn from_iter<I: IntoIterator<Item = L>>(items: I) -> Self {
        PerModel {
            items: items.into_iter().collect(),
            model: PhantomData,
        }
    }
}

impl<M, L> IntoIterator for PerModel<M, L> {
    type Item = L;
    type IntoIter = std::vec::IntoIter<L>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl<'a, M, L> IntoIterator for &'a PerModel<M, L> {
    type Item = &'a L;
    type IntoIter = std::slice::Iter<'a, L>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<M, L> Index<Idx<M>> for PerModel<M, L> {
    type Output = L;

    fn index(&self, index: Idx<M>) -> &L {
        &self.items[index.index]
    }
}

impl<M, L> IndexMut<Idx<M>> for PerModel<M, L> {
    fn index_mut(&mut self, index: Idx<M>) -> &mut L {
        &mut self.items[index.index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_indices_index_their_vectors() {
        let names = vec!["a", "b"];
        let lengths: PerModel<&str, usize> = names.iter().map(|n| n.len()).collect();
        let (second, name) = indexed(&names).nth(1).unwrap();
        assert_eq!((names[second], *name, lengths[second]), ("b", "b", 1));
        assert!(Idx::<&str>::new(0) < second);
        assert_eq!(second.index(), 1);
    }
}
